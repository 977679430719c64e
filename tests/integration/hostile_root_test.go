package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/tests/testbed"
)

// Root is asked for, never implied (issue 15, finding 10): a root
// caller's plain command is uid 0 with no capability, so a file of
// another user's that only CAP_DAC_OVERRIDE opens stays shut; with
// --root the command has root's kept capabilities and opens it. That
// root is the sandbox's (issue 17): its capabilities reach every file of
// its copy of the project, each shown with its real owner (issue 29: a
// system account's, another user's); the host root's files of those
// owners stay nobody's (TestOwnersKeptTheHostRootStaysNarrow).
func TestHostileRootIsAskedForNotImplied(t *testing.T) {
	tb := install(t)
	plant := func(name string, uid int) {
		path := filepath.Join(tb.Btrfs.Project, name)
		if err := os.WriteFile(path, []byte("not root's to read\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(path, uid, uid); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Remove(path) })
		// The control: root outside reads it, by CAP_DAC_OVERRIDE alone.
		if out := testbed.MustRun(t, "cat", path); out != "not root's to read\n" {
			t.Fatalf("root outside read %q", out)
		}
	}
	plant("other-users-secret", 65534) // nobody's: shown as it is
	plant("a-users-secret", 4321)      // a user's: shown as its own
	plant("a-services-secret", 123)    // a system account's: likewise
	id := sandbox(t)

	plain := ok(t, "exec", id, "--", "sh", "-c", "id -u; grep ^CapEff /proc/self/status; grep ^CapBnd /proc/self/status")
	if !strings.HasPrefix(plain, "0\n") || !strings.Contains(plain, "CapEff:\t0000000000000000") || !strings.Contains(plain, "CapBnd:\t0000000000000000") {
		t.Errorf("root's plain command: %q; want uid 0 with no capability, none to gain", plain)
	}
	out, errOut, code := ctl(t, "", "exec", id, "--", "cat", "other-users-secret")
	if code == 0 || strings.Contains(out, "not root's") {
		t.Errorf("root's plain command read another user's 0600 file: exit %d, %q", code, out)
	}
	if !strings.Contains(errOut, "Permission denied") {
		t.Errorf("root's plain command reading another user's file: stderr %q; want Permission denied", errOut)
	}
	// Setuid binaries and file capabilities give nothing back either.
	if out, _, code := ctl(t, "", "exec", id, "--", "sh", "-c", "su -s /bin/sh -c 'grep ^CapEff /proc/self/status' root </dev/null"); code == 0 && !strings.Contains(out, "CapEff:\t0000000000000000") {
		t.Errorf("su in root's plain command regained capabilities: %q", out)
	}

	asked := ok(t, "exec", "--root", id, "--", "sh", "-c", "grep ^CapEff /proc/self/status; cat other-users-secret")
	if strings.Contains(asked, "CapEff:\t0000000000000000") || !strings.Contains(asked, "not root's to read") {
		t.Errorf("with --root: %q; want root's kept capabilities and the file read", asked)
	}
	// A user's or a system account's file of the project is its own
	// inside: shut to root's plain command, open to --root (the copy is
	// the sandbox's whole).
	for f, owner := range map[string]string{"a-users-secret": "4321:4321\n", "a-services-secret": "123:123\n"} {
		if out := ok(t, "exec", id, "--", "stat", "-c", "%u:%g", f); out != owner {
			t.Errorf("%s inside: owner %q; want %q", f, out, owner)
		}
		if out, errOut, code := ctl(t, "", "exec", id, "--", "cat", f); code == 0 || strings.Contains(out, "not root's") || !strings.Contains(errOut, "Permission denied") {
			t.Errorf("root's plain command read %s (0600): exit %d, %q, %q", f, code, out, errOut)
		}
		if out := ok(t, "exec", "--root", id, "--", "cat", f); out != "not root's to read\n" {
			t.Errorf("--root reading %s of the project: %q", f, out)
		}
	}
	// Root's own files are still root's to change without --root.
	ok(t, "exec", id, "--", "sh", "-c", "echo changed > index.html && echo 127.0.0.2 x >> /etc/hosts")
}
