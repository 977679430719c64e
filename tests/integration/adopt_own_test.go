package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/tests/testbed"
)

// memberHome makes home afresh, empty, the member's (uid, gid); gone at
// the test's end.
func memberHome(t *testing.T, home string, uid, gid uint32) {
	t.Helper()
	os.RemoveAll(home)
	if err := os.MkdirAll(home, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(home, int(uid), int(gid)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(home) })
}

// serviceAccount makes the system account service (no home, no login)
// unless it is there, and returns its uid.
func serviceAccount(t *testing.T, service string) uint32 {
	t.Helper()
	if _, err := exec.Command("id", service).CombinedOutput(); err != nil {
		testbed.MustRun(t, "useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", service)
	}
	uid, _ := groupMemberIDs(t, service)
	return uid
}

// ownCalcAdopted: hostileOwner, a member, adopts its own calc (in its
// home, made afresh) as name, released at the test's end; it returns
// calc's path.
func ownCalcAdopted(t *testing.T, name string) string {
	t.Helper()
	uid, gid := groupMember(t, hostileOwner)
	reconfigure(t, "")
	calc := calcProject(t, hostileOwner, uid, gid, "/home/"+hostileOwner)
	t.Cleanup(func() { ctl(t, "", "project", "release", name) })
	okAs(t, hostileOwner, "project", "adopt", name, calc)
	return calc
}

// calcProject makes home (the member's, uid:gid) and in it calc, a
// Python project whose test fails, written by the member itself.
func calcProject(t *testing.T, member string, uid, gid uint32, home string) string {
	t.Helper()
	memberHome(t, home, uid, gid)
	calc := filepath.Join(home, "calc")
	out := asMember(t, member, fmt.Sprintf(`set -e
mkdir %[1]s && cd %[1]s
printf 'def add(a, b):\n    return a - b\n' > calc.py
printf '__pycache__/\n' > .gitignore
printf 'import unittest\nfrom calc import add\n\nclass T(unittest.TestCase):\n    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n' > test_calc.py
python3 -B -m unittest -q test_calc 2>&1 && echo PASSED || echo FAILED`, calc))
	if !strings.Contains(out, "FAILED") {
		t.Fatalf("calc's test before the fix: %s; want it failing", out)
	}
	return calc
}

// mounted says whether findmnt finds a mount at p.
func mounted(p string) bool {
	out, _ := exec.Command("findmnt", "-n", p).CombinedOutput()
	return len(out) > 0
}

// uidOf is p's owner uid (not following a link).
func uidOf(t *testing.T, p string) uint32 {
	t.Helper()
	uid, _, _ := ownerOf(t, p)
	return uid
}

// issue 29's "done when", as a member of group sandboxd: it adopts
// ~/calc (its home off the pool: the files in a volume of the pool,
// mounted back; and on the pool's btrfs), three sandboxes each try a
// fix with sed -i and run the test as the member, the one that passes
// is promoted, ~/calc has the fix and is the member's, and the release
// leaves a plain directory with the files. Before issue 29 the member's
// adopt was refused (root and admins only).
func TestMemberAdoptsItsOwnProject(t *testing.T) {
	tb := install(t)
	const member = "adopt-own"
	uid, gid := groupMember(t, member)
	reconfigure(t, "")
	for _, c := range []struct{ name, home string }{
		{"calc-home", "/home/" + member},
		{"calc-pool", filepath.Join(tb.Btrfs.Mount, "home-"+member)},
	} {
		t.Run(c.name, func(t *testing.T) {
			calc := calcProject(t, member, uid, gid, c.home)
			t.Cleanup(func() { ctl(t, "", "project", "release", c.name) })
			okAs(t, member, "project", "adopt", c.name, calc)
			if !mounted(calc) {
				t.Fatalf("%s is not a mount point after the adoption", calc)
			}
			fixes := []string{"s/a - b/a * b/", "s/a - b/a + b/", "s/a - b/b - a/"}
			var ids []string
			winner := ""
			for _, fix := range fixes {
				id := strings.TrimSpace(okAs(t, member, "create", "--quiet", c.name))
				ids = append(ids, id)
				t.Cleanup(func() { ctl(t, "", "destroy", id) })
				okAs(t, member, "exec", id, "--", "sed", "-i", fix, "calc.py")
				who := strings.TrimSpace(okAs(t, member, "exec", id, "--", "id", "-u"))
				if who != fmt.Sprint(uid) {
					t.Errorf("the test ran as uid %s in sandbox %s; want the member's %d", who, id, uid)
				}
				if _, _, code := ctlAs(t, member, "exec", id, "--", "python3", "-m", "unittest", "-q", "test_calc"); code == 0 {
					if winner != "" {
						t.Fatalf("two fixes pass: %s and %s", winner, fix)
					}
					winner = id
				}
			}
			if winner != ids[1] {
				t.Fatalf("the passing sandbox is %q; want %s (a + b)", winner, ids[1])
			}
			okAs(t, member, "promote", winner)
			data, err := os.ReadFile(filepath.Join(calc, "calc.py"))
			if err != nil || !strings.Contains(string(data), "a + b") {
				t.Fatalf("~/calc/calc.py after the promotion: %q, %v; want the fix", data, err)
			}
			for _, f := range []string{calc, filepath.Join(calc, "calc.py")} {
				if got := uidOf(t, f); got != uid {
					t.Errorf("%s is uid %d's after the promotion; want the member's %d", f, got, uid)
				}
			}
			// The sandbox's python3 wrote __pycache__ there; the project's
			// .gitignore leaves it out of the promotion (fs-ignore).
			if exists(filepath.Join(calc, "__pycache__")) {
				t.Errorf("~/calc has a __pycache__ after the promotion")
			}
			if out := asMember(t, member, "cd "+calc+" && python3 -B -m unittest -q test_calc 2>&1 && echo PASSED"); !strings.Contains(out, "PASSED") {
				t.Errorf("calc's test on the host after the promotion: %s", out)
			}
			for _, id := range ids {
				okAs(t, member, "destroy", id)
			}
			okAs(t, member, "project", "release", c.name)
			if mounted(calc) {
				t.Errorf("%s is still a mount point after the release", calc)
			}
			if out, err := exec.Command("btrfs", "subvolume", "show", calc).CombinedOutput(); err == nil {
				t.Errorf("%s is a subvolume after the release: %s", calc, out)
			}
			data, err = os.ReadFile(filepath.Join(calc, "calc.py"))
			if err != nil || !strings.Contains(string(data), "a + b") {
				t.Errorf("~/calc/calc.py after the release: %q, %v; want the fix", data, err)
			}
			for _, f := range []string{calc, filepath.Join(calc, "calc.py"), filepath.Join(calc, "test_calc.py")} {
				if got := uidOf(t, f); got != uid {
					t.Errorf("%s is uid %d's after the release; want the member's %d", f, got, uid)
				}
			}
			if vol := filepath.Join(tb.Btrfs.Mount, "sandboxd-adopted", c.name); exists(vol) {
				t.Errorf("the release left the volume %s", vol)
			}
		})
	}
}

// Root adopts any owner's directory, its owners kept: a user's
// /home/USER/calc, and a service account's data (with a file of root's
// and one of another uid in it). Before issue 29 both were refused
// ("owned by uid N, not root").
func TestRootAdoptsAnyOwnersDirectory(t *testing.T) {
	install(t)
	const member, service = "adopt-own", "adopt-svc"
	uid, gid := groupMember(t, member)
	svcUID := serviceAccount(t, service)
	reconfigure(t, "")
	calc := calcProject(t, member, uid, gid, "/home/"+member)
	data := "/var/lib/" + service
	os.RemoveAll(data)
	plainTree(t, data)
	t.Cleanup(func() { os.RemoveAll(data) })
	if err := os.Chown(data, int(svcUID), int(svcUID)); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, dir string }{{"root-calc", calc}, {"root-svc", data}} {
		t.Run(c.name, func(t *testing.T) {
			before := describe(t, c.dir)
			t.Cleanup(func() { ctl(t, "", "project", "release", c.name) })
			ok(t, "project", "adopt", c.name, c.dir)
			if !mounted(c.dir) {
				t.Fatalf("%s is not a mount point after the adoption", c.dir)
			}
			if got := describe(t, c.dir); got != before {
				t.Errorf("%s after the adoption:\n%s\nwant:\n%s", c.dir, got, before)
			}
			// (Writing a file of another owner than root's or the
			// sandbox's inside is issue 29's "owners kept inside", the
			// id map's part, not this one's.)
			id := strings.TrimSpace(ok(t, "create", "--quiet", c.name))
			t.Cleanup(func() { ctl(t, "", "destroy", id) })
			if out := ok(t, "exec", id, "--", "ls", "-a", c.dir); !strings.Contains(out, map[bool]string{true: "calc.py", false: "index.html"}[c.name == "root-calc"]) {
				t.Errorf("the sandbox's %s holds:\n%s", c.dir, out)
			}
			ok(t, "destroy", id)
			ok(t, "project", "release", c.name)
			if mounted(c.dir) {
				t.Errorf("%s is still a mount point after the release", c.dir)
			}
			if got := describe(t, c.dir); got != before {
				t.Errorf("%s after the release:\n%s\nwant:\n%s", c.dir, got, before)
			}
		})
	}
}

// groupMemberIDs is user name's uid and gid.
func groupMemberIDs(t *testing.T, name string) (uint32, uint32) {
	t.Helper()
	var uid, gid uint32
	out := testbed.MustRun(t, "id", "-u", name)
	fmt.Sscan(strings.TrimSpace(out), &uid)
	out = testbed.MustRun(t, "id", "-g", name)
	fmt.Sscan(strings.TrimSpace(out), &gid)
	return uid, gid
}
