package verb

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/sandboxd1"
)

// Whatever a verb hands Output.JSON, its times come out as RFC 3339 in
// UTC, and a time that is not there as null: never microseconds.
func TestJSONTimesAreRFC3339Everywhere(t *testing.T) {
	const us = 1795846230976813 // 2026-11-28T...
	want := time.UnixMicro(us).UTC().Format(time.RFC3339Nano)
	for _, c := range []struct {
		v    any
		keys []string
	}{
		{[]sandboxd1.CheckpointEntry{{Name: "a", Created: us}}, []string{"created"}},
		{[]sandboxd1.PromotionEntry{{ID: "p", Created: us}}, []string{"created"}},
		{[]sandboxd1.ProcessEntry{{ID: "x", Started: us, Ended: us}}, []string{"started", "ended"}},
		{map[string]any{"created": time.UnixMicro(us).In(time.FixedZone("X", 3600))}, []string{"created"}},
		{&sandboxd1.Promotion{ID: "p", Created: time.UnixMicro(us).In(time.FixedZone("X", 3600)), Updated: time.UnixMicro(us)}, []string{"created", "updated"}},
	} {
		var b bytes.Buffer
		if err := (Output{W: &b}).JSON(c.v); err != nil {
			t.Fatal(err)
		}
		var got any
		if err := json.Unmarshal(b.Bytes(), &got); err != nil {
			t.Fatalf("%T: %v", c.v, err)
		}
		obj, ok := got.(map[string]any)
		if list, isList := got.([]any); isList {
			obj, ok = list[0].(map[string]any)
		}
		if !ok {
			t.Fatalf("%T came out as %s", c.v, b.String())
		}
		for _, k := range c.keys {
			if obj[k] != want {
				t.Errorf("%T: %q is %v; want %s (RFC 3339, UTC)", c.v, k, obj[k], want)
			}
		}
	}
	var b bytes.Buffer
	if err := (Output{W: &b}).JSON([]sandboxd1.ProcessEntry{{ID: "x", Started: us, Argv: []string{"sleep"}}}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), `"ended": null`) || !strings.Contains(b.String(), `"argv": [`) {
		t.Errorf("a running process: %s; want its end null and its other fields kept", b.String())
	}
}
