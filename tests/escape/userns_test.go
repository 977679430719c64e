package escape

// Root inside a sandbox is the sandbox's own: the root of its user
// namespace, a block of ids nobody on the host has. These tests show who
// it is on the host, and what it still cannot reach: other sandboxes,
// and set-id files that would keep their power outside.

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/runtime/nsinit"
	"github.com/sandboxd/sandboxd/supervisor"
	"github.com/sandboxd/sandboxd/supervisor/commands"
	"github.com/sandboxd/sandboxd/supervisor/promotion"
	"github.com/sandboxd/sandboxd/supervisor/supervisortest"
	"github.com/sandboxd/sandboxd/tests/testbed"
)

// TestRootInsideIsNobodyOutside: root inside sees itself mapped from the
// sandbox's block of host ids (the whole block, one id inside for each of
// it), and on the host its init and its commands run as the block's first
// id, not as 0.
func TestRootInsideIsNobodyOutside(t *testing.T) {
	b := newBox(t, supervisor.CreateOptions{})
	if b.sb.IDs == nil {
		t.Fatal("a sandbox made with user namespaces required has no id map")
	}
	base := strconv.FormatUint(uint64(b.sb.IDs.Base), 10)
	for _, uid := range users {
		out, res := b.run(t, uid, "head -1 /proc/self/uid_map; head -1 /proc/self/gid_map; id -u")
		lines := strings.Split(strings.TrimSpace(out), "\n")
		want := []string{"0 " + base + " 65536", "0 " + base + " 65536", fmt.Sprint(uid)}
		if res.Code != 0 || len(lines) != 3 {
			t.Fatalf("reading the id maps in the sandbox (uid %d): %v %q", uid, res, out)
		}
		for i, l := range lines {
			if got := strings.Join(strings.Fields(l), " "); got != want[i] {
				t.Errorf("in the sandbox (uid %d), line %d of uid_map, gid_map, id -u: %q; want %q", uid, i+1, got, want[i])
			}
		}
	}
	initPID := boxInitPID(t, b)
	hostIDs(t, "the sandbox's init", initPID, base)
	// A command of root inside, seen from the host.
	startIn(t, b, 0, "/bin/sleep", "3021")
	hostIDs(t, "a command run as root inside", findProc(t, "/bin/sleep\x003021\x00"), base)
}

// hostIDs checks that process pid runs as uid and gid id, real,
// effective, saved and filesystem, as the host sees it.
func hostIDs(t *testing.T, what string, pid int, id string) {
	t.Helper()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatalf("reading the status of %s: %v", what, err)
	}
	want := strings.Repeat(id+" ", 4)
	for line := range strings.Lines(string(status)) {
		k, v, _ := strings.Cut(line, ":")
		if k != "Uid" && k != "Gid" {
			continue
		}
		if got := strings.Join(strings.Fields(v), " ") + " "; got != want {
			t.Errorf("ESCAPE: %s (pid %d) on the host: %s: %s; want %s", what, pid, k, strings.TrimSpace(v), strings.TrimSpace(want))
		}
	}
}

// TestOtherSandboxesAreOutOfReach: a sandbox does not see another's
// files by their host paths, nor its processes, and cannot change its
// files, as nobody or as its root.
func TestOtherSandboxesAreOutOfReach(t *testing.T) {
	e := newEnv(t)
	a := newBoxIn(t, e, supervisor.CreateOptions{})
	b := newBoxIn(t, e, supervisor.CreateOptions{})
	if a.sb.IDs == nil || b.sb.IDs == nil || a.sb.IDs.Base == b.sb.IDs.Base {
		t.Fatalf("two sandboxes' id maps: %+v and %+v; want two blocks", a.sb.IDs, b.sb.IDs)
	}
	// B's secret is its own: no file on the host holds it by chance (a
	// test fixture under /opt once held "b-secret").
	secret := "b-secret-" + rand.Text()
	if out, res := b.run(t, 0, "echo "+secret+" > b-secret.txt && echo "+secret+" > /etc/escape-b-secret"); res.Code != 0 {
		t.Fatalf("sandbox B writing its files: %v %s", res, out)
	}
	startIn(t, b, 0, "/bin/sleep", "3022")
	bInit := fmt.Sprint(boxInitPID(t, b))
	bLayer := filepath.Join(volumePath(t, b, b.sb.Layer), "upper")
	bProject := filepath.Join(b.sb.Path, "b-secret.txt")
	bSystem := filepath.Join(bLayer, "etc/escape-b-secret")
	pool := e.FS.Info().Root
	// The pattern does not match the command line of the shell that runs it.
	seeSleep := "cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\000' ' ' | grep -q 'sleep 30[2]2'"
	cases := []struct{ what, script string }{
		{"reading sandbox B's project", "cat " + bProject},
		{"reading sandbox B's system layer", "cat " + bSystem},
		{"finding sandbox B's volume", "test -e " + b.sb.Path},
		{"listing the pool", "ls " + pool},
		{"changing sandbox B's project", "test -w " + bProject + " && echo changed >> " + bProject},
		{"changing sandbox B's system layer", "test -w " + bSystem + " && echo changed >> " + bSystem},
		{"signalling sandbox B's init", "kill -0 " + bInit},
		{"seeing sandbox B's init", "test -d /proc/" + bInit},
		{"seeing sandbox B's commands", seeSleep},
	}
	for _, c := range cases {
		if !strings.HasPrefix(c.what, "changing") {
			outside(t, 0, c.what, c.script)
		}
	}
	outside(t, 0, "being able to change sandbox B's files", "test -w "+bProject+" && test -w "+bSystem)
	for _, uid := range users {
		for _, c := range cases {
			a.mustFail(t, uid, c.what, c.script)
		}
		a.mustFail(t, uid, "finding sandbox B's files anywhere", "grep -rqs "+secret+" /mnt /srv /opt /home /var/tmp /tmp /run")
	}
	for _, p := range []string{bProject, bSystem} {
		if data, err := os.ReadFile(p); err != nil || string(data) != secret+"\n" {
			t.Errorf("ESCAPE: sandbox B's %s after sandbox A tried to change it: %q %v", p, data, err)
		}
	}
	if out, res := a.run(t, 0, "cat index.html"); res.Code != 0 || out != supervisortest.Index {
		t.Errorf("sandbox A's own project (the control inside): %v %q", res, out)
	}
}

// TestSetuidFilesKeepTheirBitOnlyInside: a set-uid root file that root
// makes inside is set-uid root on disk too, but only in the sandbox's
// volumes, under the pool's root-only directory; it gives no power even
// inside (no_new_privs), and promotion refuses it.
func TestSetuidFilesKeepTheirBitOnlyInside(t *testing.T) {
	b := newBox(t, supervisor.CreateOptions{})
	pool := b.env.FS.Info().Root
	var st syscall.Stat_t
	if err := syscall.Stat(pool, &st); err != nil {
		t.Fatal(err)
	}
	if st.Mode&0o7777 != 0o700 || st.Uid != 0 {
		t.Errorf("ESCAPE: the pool's root %s: mode %o, uid %d; want 0700, root's", pool, st.Mode&0o7777, st.Uid)
	}
	layer := filepath.Join(volumePath(t, b, b.sb.Layer), "upper")
	for inside, disk := range map[string]string{
		"./escape-suid":              filepath.Join(b.sb.Path, "escape-suid"), // in the project's copy
		"/usr/local/bin/escape-suid": filepath.Join(layer, "usr/local/bin/escape-suid"),
	} {
		out, res := b.run(t, 0, "cp /usr/bin/id "+inside+" && chmod 4755 "+inside+" && stat -c '%u:%g %a' "+inside)
		if res.Code != 0 || out != "0:0 4755\n" {
			t.Fatalf("root inside making a set-uid root file %s: %v %q; want 0:0 4755", inside, res, out)
		}
		if out, _ := b.run(t, nobody, inside+" -u"); out != fmt.Sprintf("%d\n", nobody) {
			t.Errorf("ESCAPE: nobody running a set-uid root file in the sandbox: id -u %q; want %d", out, nobody)
		}
		if err := syscall.Stat(disk, &st); err != nil {
			t.Fatalf("the set-uid file made in the sandbox as %s, on disk: %v", inside, err)
		}
		if st.Uid != 0 || st.Gid != 0 || st.Mode&0o7777 != 0o4755 {
			t.Errorf("%s (%s inside) on disk: %d:%d %o; want 0:0 4755", disk, inside, st.Uid, st.Gid, st.Mode&0o7777)
		}
		if !strings.HasPrefix(disk, pool+"/") {
			t.Errorf("ESCAPE: the sandbox's %s is on disk at %s, outside the pool's root %s", inside, disk, pool)
		}
		outside(t, nobody, "running id", "/usr/bin/id -u")
		outsideFails(t, nobody, "running the sandbox's set-uid file", disk+" -u")
	}
	_, err := b.env.Promotion.Promote(ctx, b.sb.ID, promotion.PromoteOptions{})
	if !errors.Is(err, promotion.ErrPrivileged) || !strings.Contains(fmt.Sprint(err), "escape-suid") {
		t.Errorf("ESCAPE: promoting a sandbox whose project holds a set-uid root file: %v; want refused with ErrPrivileged naming it", err)
	}
}

// outsideFails runs script as uid outside any sandbox, and fails the test
// if it succeeds.
func outsideFails(t *testing.T, uid uint32, what, script string) {
	t.Helper()
	argv := []string{"setpriv", fmt.Sprintf("--reuid=%d", uid), fmt.Sprintf("--regid=%d", uid), "--clear-groups", "/bin/sh", "-c", script}
	if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err == nil {
		t.Errorf("ESCAPE: %s succeeded on the host as uid %d: %s\n%s", what, uid, script, out)
	}
}

// boxInitPID is the host pid of the sandbox's init, which answers on its
// control socket.
func boxInitPID(t *testing.T, b *box) int {
	t.Helper()
	pid, err := nsinit.PeerPID(ctx, nsinit.Control(filepath.Join(b.env.Config.RuntimeDir, b.sb.ID)))
	if err != nil {
		t.Fatalf("finding sandbox %s's init: %v", b.sb.ID, err)
	}
	return pid
}

// volumePath is where volume name is on the host.
func volumePath(t *testing.T, b *box, name string) string {
	t.Helper()
	if name == "" {
		t.Fatalf("sandbox %s has no system layer volume", b.sb.ID)
	}
	v, err := b.env.FS.Get(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	return v.Path
}

// startIn starts argv in the sandbox as uid and leaves it running until
// the test ends.
func startIn(t *testing.T, b *box, uid uint32, argv ...string) {
	t.Helper()
	null, w, _ := testbed.Capture(t)
	cmd, err := b.env.Commands.Exec(ctx, b.sb.ID, commands.ExecOptions{
		Argv: argv, UID: uid, AsRoot: uid == 0, Stdio: []*os.File{null, w, w}, Timeout: 5 * time.Minute,
	})
	if err != nil {
		t.Fatalf("starting %q in sandbox %s: %v", argv, b.sb.ID, err)
	}
	t.Cleanup(func() {
		_ = b.env.Commands.Signal(ctx, b.sb.ID, cmd.ID, syscall.SIGKILL)
		<-cmd.Done()
	})
}

// findProc is the host pid of the one process whose command line is
// cmdline (its arguments, each ended by a NUL).
func findProc(t *testing.T, cmdline string) int {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		names, err := filepath.Glob("/proc/[0-9]*/cmdline")
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range names {
			if data, err := os.ReadFile(n); err == nil && bytes.Equal(data, []byte(cmdline)) {
				pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(n)))
				return pid
			}
		}
	}
	t.Fatalf("no process on the host runs %q", strings.ReplaceAll(cmdline, "\x00", " "))
	return 0
}

// TestAPoolHostUsersReachGetsNoUserNamespace: root inside makes set-id
// files of uid 0 in its volumes, so a pool whose root host users may
// enter gets no user namespaces: required, the daemon does not start;
// the same pool at 0700 does.
func TestAPoolHostUsersReachGetsNoUserNamespace(t *testing.T) {
	e := newEnv(t)
	root := e.FS.Info().Root
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Chmod(root, 0o700) })
	sup := supervisor.New(e.Config)
	if err := sup.ProbeUserNS(ctx); err == nil || !strings.Contains(err.Error(), "mode 0755") {
		t.Errorf("requiring user namespaces on a pool of mode 0755: %v; want an error naming the mode", err)
	}
	if err := os.Chmod(root, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := supervisor.New(e.Config).ProbeUserNS(ctx); err != nil {
		t.Errorf("the same pool at 0700: %v", err)
	}
}
