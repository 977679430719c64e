package escape

import (
	"errors"
	"fmt"
	"github.com/sandboxd/sandboxd/supervisor/commands"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/runtime/nsinit"
	"github.com/sandboxd/sandboxd/supervisor"
	"github.com/sandboxd/sandboxd/supervisor/admission"
	"github.com/sandboxd/sandboxd/supervisor/checkpoints"
	"github.com/sandboxd/sandboxd/supervisor/config"
	"github.com/sandboxd/sandboxd/tests/testbed"
	"github.com/sandboxd/sandboxd/units"
	"golang.org/x/sys/unix"
)

// scoped runs script outside any sandbox, as root, in a throw-away scope
// with the given limits: the bounded control of a resource attack.
func scoped(t *testing.T, what, script string, props ...string) string {
	t.Helper()
	args := []string{"systemd-run", "--scope", "--quiet", "-p", "RuntimeMaxSec=120"}
	for _, p := range props {
		args = append(args, "-p", p)
	}
	args = append(args, "/bin/sh", "-c", script)
	return outside(t, 0, what, strings.Join(quoteAll(args), " "))
}

func quoteAll(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return out
}

// TestDefaultSandboxHasLimits: a sandbox made with no limits at all (no
// profile's, no create's) still has a MemoryMax, a TasksMax and a disk
// quota, derived from the host and the pool, and they hold.
func TestDefaultSandboxHasLimits(t *testing.T) {
	b := newBox(t, supervisor.CreateOptions{})
	memoryMax, tasksMax, _ := admission.HostDefaults(b.env.Config.Backend.Info().Root)
	show := testbed.MustRun(t, "systemctl", "show", "-p", "MemoryMax", "-p", "TasksMax", b.sb.Unit)
	if !strings.Contains(show, fmt.Sprintf("MemoryMax=%d\n", memoryMax)) || !strings.Contains(show, fmt.Sprintf("TasksMax=%d\n", tasksMax)) {
		t.Fatalf("a default sandbox's scope: %q; want MemoryMax=%d and TasksMax=%d", show, memoryMax, tasksMax)
	}
	if b.sb.DiskQuota == 0 {
		t.Errorf("a default sandbox has no disk quota")
	}
	t.Logf("derived: MemoryMax %d MiB, TasksMax %d, DiskQuota %d MiB", memoryMax>>20, tasksMax, b.sb.DiskQuota>>20)

	// Tasks: more processes than TasksMax. Outside, in a scope with room
	// for them, they all start; inside, forks fail at the limit. Each
	// waits to be killed (a sleep of a fixed time could end before the
	// last starts on a loaded machine, and the bound never be reached),
	// its output away from the pipe that tail reads to its end.
	n := tasksMax + 200
	loop := fmt.Sprintf("i=0; while [ $i -lt %d ]; do sleep infinity >/dev/null 2>&1 & i=$((i+1)); done; echo started", n)
	if out := scoped(t, "starting "+strconv.FormatUint(n, 10)+" processes", loop+"; pkill -P $$ sleep; true",
		fmt.Sprintf("TasksMax=%d", n+100), "RuntimeMaxSec=600"); !strings.Contains(out, "started") || strings.Contains(out, "fork") {
		t.Fatalf("the control: %d processes in a scope with room for them: %s", n, out)
	}
	for _, uid := range users {
		// The shell stops at its first failed fork; the sleeps left go
		// with the command's cgroup, pkill makes it quick. The deadline
		// is generous: the loop's time is the machine's speed.
		out, _ := b.run(t, uid, "("+loop+") 2>&1 | tail -3; pkill -x sleep; true", func(o *commands.ExecOptions) { o.Timeout = 10 * time.Minute })
		if !strings.Contains(out, "fork") && !strings.Contains(out, "Resource temporarily unavailable") {
			t.Errorf("ESCAPE: %d processes in a default sandbox (TasksMax %d, uid %d): no fork failed: %q", n, tasksMax, uid, out)
		}
	}

	// Memory: 8 GiB, touched. Outside, in a scope of 9 GiB, it fits.
	const alloc = "/usr/bin/python3 -c 'b = bytes(1) * (8 << 30); print(len(b) >> 30)'"
	if out := scoped(t, "allocating 8 GiB", alloc, "MemoryMax=9G", "MemorySwapMax=0"); strings.TrimSpace(out) != "8" {
		t.Fatalf("the control: 8 GiB in a 9 GiB scope: %q", out)
	}
	for _, uid := range users {
		out, res := b.run(t, uid, alloc)
		if res.How != nsinit.OOMKilled {
			t.Errorf("ESCAPE: 8 GiB in a default sandbox (MemoryMax %d MiB, uid %d): %v %q; want killed by the memory limit", memoryMax>>20, uid, res, out)
		}
	}
}

// TestScratchFilesystemsHaveASize: /tmp, /run and /dev/shm are tmpfs of
// a quarter of the sandbox's MemoryMax each.
func TestScratchFilesystemsHaveASize(t *testing.T) {
	b := newBox(t, supervisor.CreateOptions{Limits: limits(256<<20, 64)})
	want := nsinit.ScratchSizeFor(256 << 20)
	for _, uid := range users {
		for _, dir := range []string{"/tmp", "/run", "/dev/shm"} {
			out, res := b.run(t, uid, "df -B1 --output=size "+dir+" | tail -1")
			got, err := strconv.ParseUint(strings.TrimSpace(out), 10, 64)
			if res.Code != 0 || err != nil || got != want {
				t.Errorf("df %s in the sandbox (uid %d): %q (%v); want %d bytes", dir, uid, out, res, want)
			}
		}
		// A file past the size fails, before the memory limit is reached.
		out, _ := b.run(t, uid, "dd if=/dev/zero of=/tmp/big bs=1M count=100 2>&1; rm -f /tmp/big")
		if !strings.Contains(out, "No space left") {
			t.Errorf("100 MiB into a /tmp of %d MiB (uid %d): %s", want>>20, uid, out)
		}
	}
}

// TestCheckpointsAreCapped: the 33rd checkpoint of a sandbox is refused.
func TestCheckpointsAreCapped(t *testing.T) {
	b := newBox(t, supervisor.CreateOptions{})
	for i := range checkpoints.DefaultMaxCheckpoints {
		if _, err := b.env.Checkpoints.Take(ctx, b.sb.ID, fmt.Sprintf("c%d", i)); err != nil {
			t.Fatalf("checkpoint %d of %d: %v", i+1, checkpoints.DefaultMaxCheckpoints, err)
		}
	}
	_, err := b.env.Checkpoints.Take(ctx, b.sb.ID, "one-too-many")
	if !errors.Is(err, supervisor.ErrLimitReached) || !strings.Contains(err.Error(), "delete one first") {
		t.Fatalf("checkpoint %d: %v; want refused with ErrLimitReached", checkpoints.DefaultMaxCheckpoints+1, err)
	}
	if err := b.env.Checkpoints.Delete(ctx, b.sb.ID, "c0"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.env.Checkpoints.Take(ctx, b.sb.ID, "one-too-many"); err != nil {
		t.Errorf("a checkpoint after one was deleted: %v", err)
	}
}

// TestScopeIsSlicedAndClosedToDevices: the scope sits in a slice of its owner's
// slice, and its device cgroup lets no disk be opened, even through a
// node that reached the sandbox's files.
func TestScopeIsSlicedAndClosedToDevices(t *testing.T) {
	tb := testbed.Require(t)
	b := newBox(t, supervisor.CreateOptions{Owner: 4242})
	show := testbed.MustRun(t, "systemctl", "show", "-p", "Slice", "-p", "DevicePolicy", b.sb.Unit)
	for _, want := range []string{"Slice=" + units.ScopeSlice(4242, b.sb.Unit), "DevicePolicy=closed"} {
		if !strings.Contains(show, want) {
			t.Errorf("systemctl show %s: %q; want %s", b.sb.Unit, show, want)
		}
	}
	dev := strings.TrimSpace(testbed.MustRun(t, "findmnt", "-no", "SOURCE", tb.Btrfs.Mount))
	var st unix.Stat_t
	if err := unix.Stat(dev, &st); err != nil {
		t.Fatal(err)
	}
	node := filepath.Join(b.sb.Path, "escape-disk")
	if err := unix.Mknod(node, unix.S_IFBLK|0o600, int(st.Rdev)); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(node)
	outside(t, 0, "reading a disk through a node in the project", "head -c 512 "+node+" | wc -c | grep -qx 512")
	for _, uid := range users {
		b.mustFail(t, uid, "reading a disk through a node in the project", "head -c 512 escape-disk | wc -c | grep -qx 512")
		if out, res := b.run(t, uid, "echo ok > /dev/null && head -c 1 /dev/urandom | wc -c"); res.Code != 0 || strings.TrimSpace(out) != "1" {
			t.Errorf("/dev/null and /dev/urandom in the sandbox (uid %d): %v %q", uid, res, out)
		}
	}
}

// TestRootDoesNotSeeHostSecrets: with the shipped hidden paths, root in a
// sandbox (CAP_DAC_OVERRIDE) reads none of the files that hold secrets,
// and /proc and /sys show nothing of the host's hardware or kernel
// memory.
func TestRootDoesNotSeeHostSecrets(t *testing.T) {
	testbed.Require(t)
	// The testbed's root is a throw-away overlay: plant what a real host
	// has there.
	planted := map[string]string{
		"/etc/shadow-": "", "/etc/gshadow-": "", "/etc/gshadow": "",
		"/var/backups/escape.bak": "/var/backups", "/etc/ssl/private/escape.key": "/etc/ssl/private",
		"/etc/sudoers.d/escape": "/etc/sudoers.d",
		// Hidden (the daemon's own list) because root inside a user
		// namespace owns root's files.
		"/var/lib/docker/escape.key": "/var/lib/docker", "/var/log/escape-secret.log": "/var/log",
		"/var/tmp/escape-secret": "",
		// A system account's: shown as nobody's, out of root's reach.
		"/var/lib/postgresql/escape.key": "/var/lib/postgresql",
	}
	for f, dir := range planted {
		if dir != "" {
			if err := os.MkdirAll(dir, 0o700); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := os.Stat(f); err == nil {
			continue
		}
		if err := os.WriteFile(f, []byte("host secret\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		defer os.Remove(f)
		if strings.HasPrefix(f, "/var/lib/postgresql/") {
			for _, p := range []string{dir, f} {
				if err := os.Chown(p, 108, 108); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	e := newEnv(t)
	e.Config.Hidden = config.Default().Sandbox.HiddenPaths
	e.Remake(t)
	b := newBoxIn(t, e, supervisor.CreateOptions{})
	for f := range planted {
		outside(t, 0, "reading "+f, "test -s "+f+" && cat "+f+" >/dev/null")
		for _, uid := range users {
			b.mustFail(t, uid, "reading "+f, "test -s "+f+" && cat "+f+" >/dev/null")
		}
	}
	for _, p := range []string{"/proc/acpi", "/proc/asound", "/proc/scsi", "/proc/driver", "/sys/firmware", "/sys/kernel/debug", "/sys/devices/virtual/powercap"} {
		if names, err := os.ReadDir(p); err != nil || len(names) == 0 {
			continue // nothing of it on this host
		}
		outside(t, 0, "listing "+p, "test -n \"$(ls -A "+p+")\"")
		for _, uid := range users {
			b.mustFail(t, uid, "listing "+p, "test -n \"$(ls -A "+p+")\"")
		}
	}
	for _, p := range []string{"/proc/kcore", "/proc/keys", "/proc/timer_list", "/proc/sched_debug", "/proc/kallsyms"} {
		if _, err := os.Stat(p); err != nil {
			continue
		}
		outside(t, 0, "reading "+p, "head -c 64 "+p+" | wc -c | grep -qv '^0$'")
		for _, uid := range users {
			b.mustFail(t, uid, "reading "+p, "head -c 64 "+p+" | wc -c | grep -qv '^0$'")
		}
	}
}
