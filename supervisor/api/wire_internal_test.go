package api

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/sandboxd1"
	"github.com/sandboxd/sandboxd/supervisor/promotion"
	"github.com/sandboxd/sandboxd/supervisor/state"
)

// GetPromotion sends sandboxd1.Promotion, converted from the store's
// record: the JSON must be what the store's record gave, field for field,
// so that no client sees the wire change.
func TestWirePromotionIsTheStoresJSON(t *testing.T) {
	at := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	admin := uint32(0)
	full := promotion.Promotion{
		ID: "p1", Sandbox: "abc", SandboxName: "fix", Project: "web", Owner: 1000, State: state.PromotionWaiting,
		Source: "src", Base: "base", Changes: 3, Digest: "d", Force: true, Conflicts: []string{"a", "b"},
		Created: at, Updated: at.Add(time.Second), Error: "e",
		Stages: []state.StageRun{
			{Name: "staging", Target: "/srv/s", State: state.StagePassed, RollbackPoint: "rp", Approval: "admin",
				Approved: true, DecidedBy: &admin, Decided: at, Reason: "r", Started: at, Ended: at, Error: "x",
				Checks: []state.CheckResult{{Command: "make test", Status: 1, How: "exited", Duration: time.Second, Output: "o"}}},
			{Name: "prod", Target: "/srv/p", State: state.StagePending},
		},
	}
	for name, p := range map[string]promotion.Promotion{"full": full, "empty": {}} {
		want, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		got, err := json.Marshal(wirePromotion(p))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Errorf("%s: the wire's JSON\n%s\ndiffers from the store's\n%s", name, got, want)
		}
		var back sandboxd1.Promotion
		if err := json.Unmarshal(got, &back); err != nil || !reflect.DeepEqual(back, wirePromotion(p)) {
			t.Errorf("%s: the wire's JSON does not read back: %v", name, err)
		}
	}
	// Every field of the store's record must be on the wire: a field
	// added there and not here would vanish from GetPromotion.
	for _, pair := range [][2]reflect.Type{
		{reflect.TypeFor[state.Promotion](), reflect.TypeFor[sandboxd1.Promotion]()},
		{reflect.TypeFor[state.StageRun](), reflect.TypeFor[sandboxd1.StageRun]()},
		{reflect.TypeFor[state.CheckResult](), reflect.TypeFor[sandboxd1.CheckResult]()},
	} {
		for i := range pair[0].NumField() {
			f := pair[0].Field(i)
			w, ok := pair[1].FieldByName(f.Name)
			if !ok || w.Tag.Get("json") != f.Tag.Get("json") {
				t.Errorf("%s.%s (json %q) has no twin of the same JSON name in %s", pair[0], f.Name, f.Tag.Get("json"), pair[1])
			}
		}
	}
}
