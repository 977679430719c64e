package units_test

import (
	"errors"
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
