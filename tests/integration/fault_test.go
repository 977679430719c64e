package integration

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/cowfs/zfs"
	"github.com/sandboxd/sandboxd/runtime/nsinit"
	"github.com/sandboxd/sandboxd/supervisor"
	"github.com/sandboxd/sandboxd/supervisor/commands"
	"github.com/sandboxd/sandboxd/supervisor/state"
	"github.com/sandboxd/sandboxd/tests/testbed"
	"github.com/sandboxd/sandboxd/units"
)

// Faults the daemon lives through (issue 10): each test breaks one thing
// under the running daemon, checks what an operator sees while it lasts,
// that the other sandboxes carry on, and that all is well once it ends.

// sandbox makes a sandbox of "web" with sandboxctl create and flags, and
// destroys it at the end of the test.
func sandbox(t *testing.T, flags ...string) string {
	t.Helper()
	id := strings.TrimSpace(ok(t, append(append([]string{"create", "--quiet"}, flags...), "web")...))
	t.Cleanup(func() { ctl(t, "", "destroy", id) })
	return id
}

// alive checks that sandbox id runs a command.
func alive(t *testing.T, id, when string) {
	t.Helper()
	if stdout, stderr, code := ctl(t, "", "exec", id, "--", "echo", "alive"); code != 0 || stdout != "alive\n" {
		t.Fatalf("%s: sandbox %s: exec echo: exit %d: %q %q", when, id, code, stdout, stderr)
	}
}

// syncPool commits the pool's filesystem, so that space freed (or taken)
// shows in its free space and quotas.
func syncPool(t *testing.T, dir string) {
	t.Helper()
	f, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Syncfs(int(f.Fd())); err != nil {
		t.Fatal(err)
	}
}

// freeBytes is what df says is available on the filesystem of dir.
func freeBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Bavail) * st.Bsize
}

// fillPool takes the free space of the filesystem of dir, as a runaway
// writer outside any sandbox would: files allocated (fallocate: no data
// written, so the loop image stays sparse) until ENOSPC, in ever smaller
// pieces.
func fillPool(t *testing.T, dir string) {
	t.Helper()
	n := 0
	for size := int64(256 << 20); size >= 64<<10; size /= 4 {
		for {
			n++
			f, err := os.Create(filepath.Join(dir, fmt.Sprintf("f%06d", n)))
			if err == nil {
				err = unix.Fallocate(int(f.Fd()), 0, 0, size)
				f.Close()
			}
			if errors.Is(err, syscall.ENOSPC) {
				break
			}
			if err != nil {
				t.Fatalf("filling the pool: %v", err)
			}
		}
		syncPool(t, dir)
	}
}

func TestFaultPoolFull(t *testing.T) {
	tb := install(t)
	keep := sandbox(t)
	ok(t, "exec", keep, "--", "sh", "-c", "echo kept > kept.txt")
	before := len(listedIDs(t))
	// A plain directory at the top of the pool's filesystem: no project,
	// no volume of sandboxd's. Removed even when the test fails, or the
	// tests after it would find the pool full.
	filler := filepath.Join(tb.Btrfs.Mount, "fault-filler")
	if err := os.Mkdir(filler, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.RemoveAll(filler); err != nil {
			t.Errorf("removing the filler: %v", err)
		}
		syncPool(t, tb.Btrfs.Mount)
	})
	fillPool(t, filler)
	if free := freeBytes(t, tb.Btrfs.Mount); free >= 1<<20 {
		t.Fatalf("the pool has %d bytes free after filling it", free)
	}
	t.Logf("$ df -h %s\n%s", tb.Btrfs.Mount, testbed.MustRun(t, "df", "-h", tb.Btrfs.Mount))

	// A create is refused, naming the pool and what is left of it...
	root := filepath.Join(tb.Btrfs.Mount, "sandboxd")
	stdout, stderr, code := ctl(t, "", "create", "web")
	t.Logf("$ sandboxctl create web (exit %d)\n%s%s", code, stdout, stderr)
	if want := `creating a sandbox of web: no space left in the pool: ` + root + ` has \d+ bytes available; free some space first`; code != 1 || !regexp.MustCompile(want).MatchString(stderr) {
		t.Errorf("a create on a full pool: exit %d, %q; want exit 1 and %s", code, stderr, want)
	}
	if after := len(listedIDs(t)); after != before {
		t.Errorf("a refused create on a full pool left a sandbox: %d sandboxes, %d before", after, before)
	}
	if out := testbed.MustRun(t, "journalctl", "--no-pager", "-o", "cat", "-u", "sandboxd.service", "ACTION=CreateSandbox"); !strings.Contains(out, "no space left in the pool") {
		t.Errorf("the journal has no refused create on a full pool:\n%s", out)
	}
	// ...the sandbox that exists runs, reads, and gets ENOSPC for a write.
	if out := ok(t, "exec", keep, "--", "cat", "kept.txt"); out != "kept\n" {
		t.Errorf("reading a file in a sandbox on a full pool: %q", out)
	}
	stdout, stderr, code = ctl(t, "", "exec", keep, "--", "sh", "-c", "head -c 4M /dev/zero > more.bin")
	if code == 0 || !strings.Contains(stderr+stdout, "No space left on device") {
		t.Errorf("writing 4 MiB in a sandbox on a full pool: exit %d: %q %q; want ENOSPC", code, stdout, stderr)
	}

	// The fault ends: the filler goes, and creates work again.
	if err := os.RemoveAll(filler); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); freeBytes(t, tb.Btrfs.Mount) < 64<<20; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the pool has %d bytes free 30s after the filler was removed", freeBytes(t, tb.Btrfs.Mount))
		}
		syncPool(t, tb.Btrfs.Mount)
	}
	fresh := sandbox(t)
	for _, id := range []string{keep, fresh} {
		if out := ok(t, "exec", id, "--", "sh", "-c", "head -c 4M /dev/zero > more.bin && stat -c %s more.bin"); out != "4194304\n" {
			t.Errorf("writing 4 MiB in sandbox %s once the pool has room: %q", id, out)
		}
	}
}

func TestFaultQuotaHit(t *testing.T) {
	// The daemon's pool is the testbed's btrfs, as for tests/escape's
	// limits test: the backend turns simple quotas on with the first
	// quota it sets. No embedded pool needed.
	install(t)
	other := sandbox(t)
	id := sandbox(t, "--disk", "8M")
	// 20 MiB under an 8 MiB quota: dd stops at the quota with EDQUOT.
	out := ok(t, "exec", id, "--", "sh", "-c", "dd if=/dev/zero of=big bs=1M count=20 2>&1; echo dd=$?; sync; stat -c size=%s big")
	m := regexp.MustCompile(`(?m)^size=(\d+)$`).FindStringSubmatch(out)
	if !strings.Contains(out, "Disk quota exceeded") || !strings.Contains(out, "dd=1\n") || m == nil {
		t.Fatalf("writing 20 MiB under an 8 MiB quota:\n%s", out)
	}
	if size, _ := strconv.Atoi(m[1]); size > 8<<20 || size < 4<<20 {
		t.Errorf("a write under an 8 MiB quota stopped at %d bytes; want 4 to 8 MiB", size)
	}
	// status shows the disk at its limit.
	st := ok(t, "status", id)
	t.Logf("$ sandboxctl status %s\n%s", id, st)
	disk := regexp.MustCompile(`(?m)^Disk:\s+(\d+\.\d) MiB of 8\.0 MiB \((\d+)%\)$`).FindStringSubmatch(st)
	if disk == nil {
		t.Fatalf("status has no Disk line of 8.0 MiB:\n%s", st)
	}
	if pct, _ := strconv.Atoi(disk[2]); pct < 75 {
		t.Errorf("status after the quota was hit: disk %s MiB, %d%% of the limit; want near it", disk[1], pct)
	}
	// The sandbox runs on, and writes again once it frees space; the
	// other, without a quota, is not held by this one's.
	if out := ok(t, "exec", id, "--", "sh", "-c", "rm big && sync && head -c 1M /dev/zero > small && stat -c %s small"); out != "1048576\n" {
		t.Errorf("writing 1 MiB after freeing the quota: %q", out)
	}
	if out := ok(t, "exec", other, "--", "sh", "-c", "head -c 16M /dev/zero > f && stat -c %s f"); out != "16777216\n" {
		t.Errorf("writing 16 MiB in another sandbox: %q", out)
	}
}

// TestFaultSystemdReexec re-executes the testbed's systemd under the
// daemon. The daemon reaches systemd through the system bus, not
// systemd's private socket, so its connection stays; systemd comes back
// on the bus with its jobs and subscribers.
func TestFaultSystemdReexec(t *testing.T) {
	install(t)
	pid := mainPID(t)
	a := sandbox(t)
	testbed.MustRun(t, "systemctl", "daemon-reexec")
	if st := strings.TrimSpace(testbed.MustRun(t, "systemctl", "is-system-running")); st != "running" {
		t.Fatalf("systemd after daemon-reexec: %s", st)
	}
	alive(t, a, "after daemon-reexec")
	// A create starts a scope and waits for its job; freeze and destroy
	// ask systemd too.
	b := sandbox(t)
	alive(t, b, "made after daemon-reexec")
	if st := ok(t, "status", b); !regexp.MustCompile(`(?m)^Tasks:\s+\d+`).MatchString(st) {
		t.Errorf("status of a sandbox made after daemon-reexec reads no tasks from systemd:\n%s", st)
	}
	ok(t, "freeze", b)
	ok(t, "thaw", b)
	ok(t, "destroy", b)
	if st, _ := exec.Command("systemctl", "is-active", "sandbox-"+b+".scope").Output(); strings.TrimSpace(string(st)) == "active" {
		t.Errorf("the scope of a sandbox destroyed after daemon-reexec is still active")
	}
	if now := mainPID(t); now != pid {
		t.Errorf("sandboxd was restarted by daemon-reexec (pid %d, now %d)", pid, now)
	}
}

// TestFaultSystemBusRestart restarts dbus under the daemon: its
// connection, and its name on the bus, are gone. The daemon exits and
// systemd starts it again on the new bus; the sandboxes run on.
func TestFaultSystemBusRestart(t *testing.T) {
	install(t)
	pid := mainPID(t)
	a := sandbox(t)
	ok(t, "exec", a, "--", "sh", "-c", "echo kept > kept.txt")
	// Whatever happens, the tests after this one find a daemon.
	t.Cleanup(func() {
		if _, _, code := ctl(t, "", "list"); code != 0 {
			testbed.MustRun(t, "systemctl", "reset-failed", "sandboxd.service")
			testbed.MustRun(t, "systemctl", "restart", "sandboxd.service")
		}
	})
	testbed.MustRun(t, "systemctl", "restart", "dbus.service")
	deadline := time.Now().Add(30 * time.Second)
	for {
		stdout, stderr, code := ctl(t, "", "list", "--quiet")
		if code == 0 && strings.Contains(stdout, a) {
			break
		}
		if time.Now().After(deadline) {
			journal, _ := exec.Command("journalctl", "--no-pager", "-n", "20", "-u", "sandboxd.service").CombinedOutput()
			t.Fatalf("sandboxd does not answer 30s after dbus restarted: exit %d %q %q\n%s", code, stdout, stderr, journal)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if now := mainPID(t); now == pid {
		t.Errorf("sandboxd (pid %d) answers after dbus restarted, on a connection that cannot have survived", pid)
	}
	if out := testbed.MustRun(t, "journalctl", "--no-pager", "-o", "cat", "-u", "sandboxd.service"); !strings.Contains(out, "the connection to the system bus was lost") {
		t.Errorf("the journal does not say why sandboxd stopped:\n%s", out)
	}
	if out := ok(t, "exec", a, "--", "cat", "kept.txt"); out != "kept\n" {
		t.Errorf("the sandbox made before dbus restarted: %q", out)
	}
	alive(t, sandbox(t), "made after dbus restarted")
}

// scopePIDs lists the processes in a unit's cgroup.
func scopePIDs(t *testing.T, unit string) []int {
	t.Helper()
	cg := strings.TrimSpace(testbed.MustRun(t, "systemctl", "show", "-P", "ControlGroup", unit))
	for _, hier := range []string{"/sys/fs/cgroup/unified", "/sys/fs/cgroup/systemd", "/sys/fs/cgroup"} {
		data, err := os.ReadFile(filepath.Join(hier, cg, "cgroup.procs"))
		if err != nil {
			continue
		}
		var pids []int
		for _, f := range strings.Fields(string(data)) {
			if pid, err := strconv.Atoi(f); err == nil {
				pids = append(pids, pid)
			}
		}
		return pids
	}
	t.Fatalf("no cgroup.procs for %s (%s)", unit, cg)
	return nil
}

// TestFaultDeadInit kills a sandbox's init (its scope's only process):
// the scope ends, its control socket stays behind in /run/sandboxd.
func TestFaultDeadInit(t *testing.T) {
	install(t)
	other := sandbox(t)
	id := sandbox(t)
	ok(t, "exec", id, "--", "sh", "-c", "echo kept > kept.txt")
	unit := "sandbox-" + id + ".scope"
	pids := scopePIDs(t, unit)
	if len(pids) == 0 {
		t.Fatalf("scope %s has no processes", unit)
	}
	for _, pid := range pids {
		testbed.MustRun(t, "kill", "-9", strconv.Itoa(pid))
	}
	// status says so (once the daemon reaped its child)...
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		st := strings.TrimSpace(ok(t, "status", "--quiet", id))
		if st == "stopped" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status of a sandbox whose init was killed says %q 10s later; want stopped", st)
		}
	}
	if list := ok(t, "list"); !regexp.MustCompile(`(?m)^` + id + `\s+\S+\s+web\s+stopped\s`).MatchString(list) {
		t.Errorf("list does not show the sandbox whose init was killed as stopped:\n%s", list)
	}
	// ...exec says why it cannot run...
	fails(t, 1, `the sandbox's init is not running`, "exec", id, "--", "cat", "kept.txt")
	// ...and the other sandbox does not notice.
	alive(t, other, "beside a sandbox whose init was killed")

	// A restart of the daemon starts the sandbox again, with its files.
	old := mainPID(t)
	testbed.MustRun(t, "systemctl", "restart", "sandboxd.service")
	waitActive(t, old)
	if st := strings.TrimSpace(ok(t, "status", "--quiet", id)); st != "ready" {
		t.Errorf("status after the daemon's restart: %q; want ready", st)
	}
	if out := ok(t, "exec", id, "--", "cat", "kept.txt"); out != "kept\n" {
		t.Errorf("the restarted sandbox's file: %q", out)
	}
	if out := testbed.MustRun(t, "journalctl", "--no-pager", "-o", "cat", "SANDBOX_ID="+id, "ACTION=reconcile"); !strings.Contains(out, "restarted") {
		t.Errorf("the journal does not say the sandbox was restarted:\n%s", out)
	}
	alive(t, other, "after the daemon's restart")
}

// throttleFile is the root blkio cgroup's write limits (cgroup v1, as on
// the testbed's hybrid layout): a limit there holds every writer of the
// device, the filesystem's own threads included.
const throttleFile = "/sys/fs/cgroup/blkio/blkio.throttle.write_bps_device"

// throttle limits writes to device (major:minor) to bps bytes a second; 0
// lifts the limit.
func throttle(t *testing.T, device string, bps int) {
	t.Helper()
	if err := os.WriteFile(throttleFile, []byte(fmt.Sprintf("%s %d\n", device, bps)), 0o644); err != nil {
		t.Fatalf("throttling %s: %v", device, err)
	}
}

// TestFaultSlowDisk throttles the pool's loop device to 256 KiB/s of
// writes (no device-mapper in the testbed's kernel, so no dm-delay): the
// daemon answers at once, creates wait for the disk and finish, its
// watchdog does not fire, and creates are quick again once the disk is.
func TestFaultSlowDisk(t *testing.T) {
	tb := install(t)
	src := strings.TrimSpace(testbed.MustRun(t, "findmnt", "-n", "-o", "SOURCE", tb.Btrfs.Mount))
	var st unix.Stat_t
	if err := unix.Stat(src, &st); err != nil {
		t.Fatal(err)
	}
	device := fmt.Sprintf("%d:%d", unix.Major(st.Rdev), unix.Minor(st.Rdev))
	// The limit outlives the testbed on a loop device that is only
	// detached: one a killed run left is lifted first.
	if rules, _ := os.ReadFile(throttleFile); strings.Contains(string(rules), device+" ") {
		t.Logf("lifting a limit on %s (%s) left by an earlier run: %q", src, device, rules)
		throttle(t, device, 0)
	}
	pid := mainPID(t)
	a := sandbox(t)
	direct := func() time.Duration {
		start := time.Now()
		testbed.MustRun(t, "dd", "if=/dev/zero", "of="+filepath.Join(tb.Btrfs.Mount, "fault-direct"), "bs=64K", "count=16", "oflag=direct")
		_ = os.Remove(filepath.Join(tb.Btrfs.Mount, "fault-direct"))
		return time.Since(start)
	}
	t.Cleanup(func() { throttle(t, device, 0) })
	throttle(t, device, 256<<10)
	if d := direct(); d < 2*time.Second {
		t.Fatalf("1 MiB written to the pool in %v under a 256 KiB/s limit: the disk is not slow", d)
	}
	// Data a sandbox wrote and the disk has not taken yet.
	ok(t, "exec", a, "--", "sh", "-c", "head -c 4M /dev/zero > dirty.bin")

	start := time.Now()
	create := exec.Command(ctlBin(), "create", "--quiet", "web")
	var createOut strings.Builder
	create.Stdout, create.Stderr = &createOut, &createOut
	if err := create.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- create.Wait() }()
	var createErr error
	calls := [][]string{{"list"}, {"status", a}, {"exec", a, "--", "echo", "alive"}}
	slowest := make([]time.Duration, len(calls))
	for waiting := true; waiting; {
		select {
		case createErr = <-done:
			waiting = false
		case <-time.After(500 * time.Millisecond):
			if time.Since(start) > 90*time.Second {
				_ = create.Process.Kill()
				t.Fatalf("a create on a slow disk has not answered in 90s")
			}
			// Meanwhile the daemon answers, and the sandbox runs.
			for i, args := range calls {
				began := time.Now()
				ok(t, args...)
				slowest[i] = max(slowest[i], time.Since(began))
			}
		}
	}
	took := time.Since(start)
	if id := strings.TrimSpace(createOut.String()); id != "" && regexp.MustCompile(`^[0-9a-f]{12}$`).MatchString(id) {
		t.Cleanup(func() { ctl(t, "", "destroy", id) })
	}
	if createErr != nil {
		t.Fatalf("a create on a slow disk: %v: %s", createErr, createOut.String())
	}
	t.Logf("on a disk of 256 KiB/s: a create took %v", took)
	// exec touches no disk; list and status read the pool (its volumes,
	// their usage), which waits for the filesystem's commits: slow (11 s
	// seen on a loaded machine), but answered within the 25s a D-Bus
	// client waits by default, which is what a user sees.
	for i, args := range calls {
		t.Logf("meanwhile, sandboxctl %s answered in %v at most", args[0], slowest[i])
		limit := 20 * time.Second
		if args[0] == "exec" {
			limit = 2 * time.Second
		}
		if slowest[i] > limit {
			t.Errorf("sandboxctl %s took %v while a create waited for the disk", args[0], slowest[i])
		}
	}
	if now := mainPID(t); now != pid {
		t.Errorf("sandboxd was restarted (pid %d, now %d) while the disk was slow", pid, now)
	}

	// The fault ends: creates are quick again.
	throttle(t, device, 0)
	start = time.Now()
	sandbox(t)
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("a create after the disk is fast again took %v", d)
	}
}

// zfsFuseUnit is the testbed's zfs-fuse service (tests/testbed's
// provisionZFS starts it).
const zfsFuseUnit = "testbed-zfs-fuse.service"

// supRun runs script as root in sandbox id of cmds' supervisor, and returns its output
// and how it ended, or Exec's error.
func supRun(t *testing.T, cmds *commands.Commands, id, script string) (string, nsinit.Result, error) {
	t.Helper()
	null, w, collect := testbed.Capture(t)
	cmd, err := cmds.Exec(supervisor.WithActor(context.Background(), supervisor.Daemon("test")), id, commands.ExecOptions{
		Argv: []string{"/bin/sh", "-c", script}, AsRoot: true, Stdio: []*os.File{null, w, w}, Timeout: 30 * time.Second,
	})
	out := collect()
	if err != nil {
		return out, nsinit.Result{}, err
	}
	return out, cmd.Result(), nil
}

// startZFSFuse brings the testbed's zfs-fuse back as its service would
// start: the process (as provisionZFS starts it), which imports the pool
// from its cache, then the datasets mounted again in place of the dead
// FUSE mounts the killed one left. statfs tells a dead mount: zfs-fuse
// lets the kernel cache attributes for an hour, so stat does not.
func startZFSFuse(t *testing.T) {
	t.Helper()
	if st, _ := exec.Command("systemctl", "is-active", zfsFuseUnit).Output(); strings.TrimSpace(string(st)) != "active" {
		_ = exec.Command("systemctl", "reset-failed", zfsFuseUnit).Run()
		testbed.MustRun(t, "systemd-run", "--quiet", "--unit="+zfsFuseUnit, "--property=DefaultDependencies=no", "--", "/usr/sbin/zfs-fuse", "--no-daemon", "--no-kstat-mount")
	}
	for deadline := time.Now().Add(30 * time.Second); exec.Command("zpool", "list", "-H").Run() != nil; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("zfs-fuse does not answer 30s after its start")
		}
	}
	mounts := strings.Split(strings.TrimSpace(testbed.MustRun(t, "findmnt", "-rn", "-o", "TARGET")), "\n")
	for i := len(mounts) - 1; i >= 0; i-- { // the deepest first
		var st unix.Statfs_t
		if m := mounts[i]; strings.HasPrefix(m, testbed.ZFSMount) && errors.Is(unix.Statfs(m, &st), unix.ENOTCONN) {
			if err := unix.Unmount(m, unix.MNT_DETACH); err != nil {
				t.Errorf("unmounting the dead FUSE mount %s: %v", m, err)
			}
		}
	}
	testbed.MustRun(t, "zfs", "mount", "-a")
}

// TestFaultZFSFuseGoesAway kills zfs-fuse, the process behind a ZFS pool
// on the testbed, under a supervisor on that pool (the installed daemon
// is on btrfs; this is the daemon's supervisor, with the daemon's own
// binary as the sandboxes' init). While it is gone, every ZFS command
// fails and every mount of the pool is dead; once it is back, new
// sandboxes work, and an old one, whose mount namespace holds the dead
// mount, is started again by the daemon's next start.
func TestFaultZFSFuseGoesAway(t *testing.T) {
	tb := testbed.Require(t)
	ctx := supervisor.WithActor(context.Background(), supervisor.Daemon("test"))
	root, project := tb.ZFS.Pool+"/fault-zfs", tb.ZFS.Pool+"/fault-web"
	testbed.MustRun(t, "zfs", "create", project)
	t.Cleanup(func() { testbed.DestroyDatasets(t, root, project) })
	mp := strings.TrimSpace(testbed.MustRun(t, "zfs", "get", "-H", "-o", "value", "mountpoint", project))
	if err := os.WriteFile(filepath.Join(mp, "index.html"), []byte("on zfs\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fs, err := zfs.Open(ctx, root)
	if err != nil {
		t.Fatal(err)
	}
	um, err := units.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(um.Close)
	store, err := state.Open(filepath.Join(t.TempDir(), "state.db"), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	cfg := supervisor.Config{
		Backend: fs, Units: um, Store: store, Projects: map[string]string{"web": project},
		InitCommand: []string{daemonBin, "sandbox-init"}, RuntimeDir: "/run/sbx-fault",
		Profiles:       map[string]supervisor.Profile{"default": {Network: nsinit.NetworkNone}},
		DefaultProfile: "default",
		Log:            slog.New(slog.DiscardHandler),
	}
	sup := supervisor.New(cfg)
	cmds := commands.New(sup.Host().(commands.Host))
	t.Cleanup(func() {
		list, _ := sup.List(ctx)
		for _, sb := range list {
			if err := sup.Destroy(ctx, sb.ID); err != nil {
				t.Errorf("destroying sandbox %s: %v", sb.ID, err)
			}
		}
	})
	old, err := sup.Create(ctx, supervisor.CreateOptions{Project: "web"})
	if err != nil {
		t.Fatal(err)
	}
	if out, res, err := supRun(t, cmds, old.ID, "echo kept > kept.txt && cat index.html"); err != nil || res.Code != 0 || out != "on zfs\n" {
		t.Fatalf("a sandbox on ZFS: %q %v %v", out, res, err)
	}

	// zfs-fuse killed loses what its open transaction group holds, as any
	// crash of ZFS does: the pool commits first (setting a property waits
	// for its transaction group to reach the disk).
	testbed.MustRun(t, "zfs", "set", "org.sandboxd:fault-test=committed", project)

	// zfs-fuse dies (kill -9: no unmounting on its way out). Registered
	// after the sandboxes' cleanup, so that it runs before it: destroying
	// a sandbox needs zfs-fuse.
	t.Cleanup(func() { startZFSFuse(t) })
	pid := strings.TrimSpace(testbed.MustRun(t, "systemctl", "show", "-P", "MainPID", zfsFuseUnit))
	testbed.MustRun(t, "kill", "-9", pid)
	for deadline := time.Now().Add(10 * time.Second); exec.Command("zpool", "list", "-H").Run() == nil; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("zfs-fuse still answers 10s after kill -9 %s", pid)
		}
	}
	// A create fails in zfs-fuse's own words, and leaves no record...
	const why = "Please make sure that the zfs-fuse daemon is running"
	if _, err := sup.Create(ctx, supervisor.CreateOptions{Project: "web"}); err == nil || !strings.Contains(err.Error(), why) {
		t.Errorf("a create while zfs-fuse is gone: %v; want an error that says %q", err, why)
	} else {
		t.Logf("a create while zfs-fuse is gone: %v", err)
	}
	list, err := sup.List(ctx)
	if err != nil || len(list) != 1 || list[0].ID != old.ID {
		t.Errorf("sandboxes while zfs-fuse is gone: %v, %v; want only %s", list, err, old.ID)
	}
	// ...so does a command in the sandbox (its files are gone with
	// zfs-fuse); its scope, limits and usage are systemd's, and stay.
	if _, _, err := supRun(t, cmds, old.ID, "cat index.html"); err == nil || !strings.Contains(err.Error(), why) {
		t.Errorf("a command while zfs-fuse is gone: %v; want an error that says %q", err, why)
	}
	if in, err := sup.Inspect(ctx, old.ID, supervisor.LiveUsage); err != nil || !in.Tasks.Known || in.Tasks.Value == 0 {
		t.Errorf("inspecting the sandbox while zfs-fuse is gone: %+v, %v; want its tasks", in, err)
	}

	// zfs-fuse is back: creates work again.
	startZFSFuse(t)
	fresh, err := sup.Create(ctx, supervisor.CreateOptions{Project: "web"})
	if err != nil {
		t.Fatalf("a create once zfs-fuse is back: %v", err)
	}
	if out, res, err := supRun(t, cmds, fresh.ID, "cat index.html"); err != nil || res.Code != 0 || out != "on zfs\n" {
		t.Errorf("a sandbox made once zfs-fuse is back: %q %v %v", out, res, err)
	}
	// The old sandbox's mount namespace still holds the dead mount.
	out, res, err := supRun(t, cmds, old.ID, "cat kept.txt")
	if err != nil || !strings.Contains(out, "Transport endpoint is not connected") {
		t.Errorf("the old sandbox once zfs-fuse is back: %q %v %v; want its dead mount", out, res, err)
	}
	// The daemon's next start (a new supervisor on the same records)
	// finds its files unreachable and starts it again, files and all.
	sup = supervisor.New(cfg)
	cmds = commands.New(sup.Host().(commands.Host))
	rep, err := sup.Reconcile(ctx)
	if err != nil || !slices.Contains(rep.Restarted, old.ID) || !slices.Contains(rep.Adopted, fresh.ID) {
		t.Fatalf("reconciling once zfs-fuse is back: %+v, %v; want %s restarted and %s adopted", rep, err, old.ID, fresh.ID)
	}
	if out, res, err := supRun(t, cmds, old.ID, "cat kept.txt index.html"); err != nil || res.Code != 0 || out != "kept\non zfs\n" {
		t.Errorf("the old sandbox after the restart: %q %v %v", out, res, err)
	}
}
