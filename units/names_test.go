package units_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/units"
)

func TestCheckScopeName(t *testing.T) {
	for _, name := range []string{"sandbox-1f3a.scope", "a.scope", "x:y_z.w-1.scope", strings.Repeat("a", 249) + ".scope"} {
		if err := units.CheckScopeName(name); err != nil {
			t.Errorf("CheckScopeName(%q) = %v; want it valid", name, err)
		}
	}
	for _, name := range []string{"", ".scope", "sandbox-1.service", "sandbox-1", "a/b.scope", "../a.scope",
		"a b.scope", "a@b.scope", `a\x2db.scope`, "a\x00.scope", "é.scope", strings.Repeat("a", 250) + ".scope"} {
		if err := units.CheckScopeName(name); !errors.Is(err, units.ErrInvalidName) {
			t.Errorf("CheckScopeName(%q) = %v; want ErrInvalidName", name, err)
		}
	}
}

// A user's scopes spread over ScopeBuckets slices under the user's own,
// which IsOwnerSlice tells from it.
func TestScopeSlicesSpreadUnderTheOwners(t *testing.T) {
	counts := map[string]int{}
	for i := range 1000 {
		s := units.ScopeSlice(1000, fmt.Sprintf("sandbox-%012x.scope", i*7919))
		if !strings.HasPrefix(s, "sandboxd-u1000-") || !strings.HasSuffix(s, ".slice") {
			t.Fatalf("ScopeSlice = %q; want a child of %s", s, units.OwnerSlice(1000))
		}
		if units.IsOwnerSlice(s) {
			t.Errorf("IsOwnerSlice(%q) = true for a bucket", s)
		}
		counts[s]++
	}
	if len(counts) != units.ScopeBuckets {
		t.Errorf("1,000 scopes went into %d slices; want %d", len(counts), units.ScopeBuckets)
	}
	for s, n := range counts {
		if n > 2*1000/units.ScopeBuckets {
			t.Errorf("%s holds %d of 1,000 scopes; want about %d", s, n, 1000/units.ScopeBuckets)
		}
	}
	for name, want := range map[string]bool{units.OwnerSlice(0): true, units.OwnerSlice(4242): true,
		"sandboxd-u01.slice": false, "sandboxd-ux.slice": false, "sandboxd-u1.scope": false, "sandboxd.slice": false} {
		if got := units.IsOwnerSlice(name); got != want {
			t.Errorf("IsOwnerSlice(%q) = %v; want %v", name, got, want)
		}
	}
}
