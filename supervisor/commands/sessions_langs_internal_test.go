package commands

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// A sql session opened by root without root's rights (no --root: uid 0
// with no capability) cannot run psql as the role's user: its driver
// says so, and how to open it, instead of ending with nothing said.
// With root's rights it becomes the role's user and tries to connect.
func TestUnitSQLDriverSaysWhyItCannotBecomeTheRole(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root")
	}
	for _, tool := range []string{"python3", "psql", "setpriv"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s", tool)
		}
	}
	greet := func(argv ...string) string {
		t.Helper()
		cmd := exec.Command(argv[0], append(argv[1:], "python3", "-u", "-c", sqlDriver, "4096")...)
		cmd.Env = []string{"PATH=/usr/bin:/bin", "PGHOST=/nonexistent", "PGUSER=nobody"}
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("the driver: %v, %q", err, out)
		}
		return string(out)
	}
	if out := greet("env"); !strings.Contains(out, "psql could not connect as role nobody") {
		t.Errorf("with root's rights: %q; want psql's failure to connect as nobody", out)
	}
	out := greet("setpriv", "--inh-caps=-all", "--bounding-set=-all")
	if !strings.Contains(out, "starting psql as user nobody") || !strings.Contains(out, "--root") {
		t.Errorf("uid 0 without root's rights: %q; want why psql did not start, naming --root", out)
	}
}
