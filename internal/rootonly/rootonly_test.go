package rootonly

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A path is root's alone only when every directory up to / is; the test
// makes its own tree (as root, where the tests run) under a root-owned
// temporary directory.
func TestCheck(t *testing.T) {
	base := rootBase(t)
	dir := filepath.Join(base, "srv", "web")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "app.env")
	if err := os.WriteFile(file, []byte("A=1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{dir, file} {
		if err := Check(p); err != nil {
			t.Errorf("Check(%s) of a root-only tree: %v", p, err)
		}
	}
	cases := []struct {
		what   string
		change func() error
		want   string
	}{
		{"a parent owned by a user", func() error { return os.Chown(filepath.Dir(dir), 1000, 1000) }, "owned by uid 1000"},
		{"a parent writable by a group", func() error {
			return errors.Join(os.Chown(filepath.Dir(dir), 0, 1000), os.Chmod(filepath.Dir(dir), 0o775))
		}, "writable by group 1000"},
		{"a parent writable by anyone, sticky", func() error { return os.Chmod(filepath.Dir(dir), 0o1777) }, "writable by anyone"},
		{"a file writable by others", func() error { return os.Chmod(file, 0o666) }, "writable by others"},
	}
	for _, c := range cases {
		if err := c.change(); err != nil {
			t.Fatal(err)
		}
		p := dir
		if strings.Contains(c.what, "file") {
			p = file
		}
		if err := Check(p); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Check with %s: %v; want %q", c.what, err, c.want)
		}
		// Back to root's alone.
		_ = os.Chown(filepath.Dir(dir), 0, 0)
		_ = os.Chmod(filepath.Dir(dir), 0o755)
		_ = os.Chmod(file, 0o600)
	}
	link := filepath.Join(base, "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	if err := Check(link); err == nil || !strings.Contains(err.Error(), "symlink") {
		t.Errorf("Check of a symlink: %v", err)
	}
}

// A home's project: the owner beside root, and no one else, up to /.
func TestCheckOwner(t *testing.T) {
	base := rootBase(t)
	home := filepath.Join(base, "home", "agent")
	dir := filepath.Join(home, "calc")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{home, dir} {
		if err := os.Chown(p, 1001, 1001); err != nil {
			t.Fatal(err)
		}
	}
	if err := CheckOwner(dir, 1001); err != nil {
		t.Errorf("CheckOwner of uid 1001's dir in its home: %v", err)
	}
	if err := Check(dir); err == nil || !strings.Contains(err.Error(), "owned by uid 1001, not root") {
		t.Errorf("Check of uid 1001's dir: %v; want it refused", err)
	}
	if err := CheckOwner(dir, 1002); err == nil || !strings.Contains(err.Error(), "owned by uid 1001, not root or uid 1002") {
		t.Errorf("CheckOwner of uid 1001's dir for uid 1002: %v; want it refused", err)
	}
	// Another user's directory on the way: it could rename the home.
	if err := os.Chown(filepath.Dir(home), 1002, 1002); err != nil {
		t.Fatal(err)
	}
	if err := CheckOwner(dir, 1001); err == nil || !strings.Contains(err.Error(), "owned by uid 1002") {
		t.Errorf("CheckOwner with another user's directory above: %v; want it refused", err)
	}
	_ = os.Chown(filepath.Dir(home), 0, 0)
	// The owner's home writable by a group: its members could too.
	if err := os.Chmod(home, 0o775); err != nil {
		t.Fatal(err)
	}
	if err := CheckOwner(dir, 1001); err == nil || !strings.Contains(err.Error(), "writable by group 1001") {
		t.Errorf("CheckOwner with a group-writable home: %v; want it refused", err)
	}
}

// rootBase makes a root-owned directory, mode 0755, under /var/tmp (whose
// parents are root's alone), removed at the test's end.
func rootBase(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("the test makes root-owned trees: run it as root (make test does)")
	}
	base, err := os.MkdirTemp("/var/tmp", "rootonly-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	return base
}
