package units

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	sdbus "github.com/coreos/go-systemd/v22/dbus"
	"golang.org/x/sys/unix"
)

// Freeze stops every process of the scope (or service: a host service
// that writes a project, for its snapshot) where it is, until Thaw. How
// depends on the machine (Capabilities.Freeze): systemd's cgroup freezer
// where it has one, else SIGSTOP to each process. A systemd that refuses
// FreezeUnit (NotSupported: no cgroup v2 controllers, as on a hybrid
// layout; UnknownMethod: older than 246) gets the signals too.
func (m *Manager) Freeze(ctx context.Context, name string) error {
	return m.freezeOrThaw(ctx, "freezing", name, true)
}

// Thaw resumes a scope or service that Freeze stopped, the same way it
// was frozen.
func (m *Manager) Thaw(ctx context.Context, name string) error {
	return m.freezeOrThaw(ctx, "thawing", name, false)
}

func (m *Manager) freezeOrThaw(ctx context.Context, op, name string, freeze bool) error {
	check := CheckScopeName
	if strings.HasSuffix(name, ".service") {
		check = CheckServiceName
	}
	if err := check(name); err != nil {
		return fmt.Errorf("%s %s: %w", op, name, err)
	}
	if m.caps.Freeze == FreezeCgroup {
		err := m.native(ctx, name, freeze)
		if err == nil {
			return nil
		}
		if n := dbusErrorName(err); n != "org.freedesktop.DBus.Error.NotSupported" && n != "org.freedesktop.DBus.Error.UnknownMethod" {
			return wrap(op, name, err)
		}
		// systemd refused: use signals.
	}
	sig := syscall.SIGCONT
	if freeze {
		sig = syscall.SIGSTOP
	}
	if err := m.conn.KillUnitWithTarget(ctx, name, sdbus.All, int32(sig)); err != nil {
		return wrap(op, name, fmt.Errorf("sending %s: %w", unix.SignalName(sig), err))
	}
	if freeze {
		// kill(2) only makes SIGSTOP pending: a process stops when it next
		// runs its signal handling, which on a busy machine can be well
		// after systemd's reply. Frozen means stopped: wait for it.
		if err := m.waitStopped(ctx, name); err != nil {
			return wrap(op, name, err)
		}
	}
	return nil
}

// maxStopWait bounds waitStopped.
const maxStopWait = 30 * time.Second

// waitStopped waits, bounded by ctx (and maxStopWait), until every thread of every process
// in the unit's cgroup is stopped (or gone). A thaw's SIGCONT needs no
// such wait: the kernel wakes stopped threads as it sends it.
func (m *Manager) waitStopped(ctx context.Context, name string) error {
	typ := "Scope"
	if strings.HasSuffix(name, ".service") {
		typ = "Service"
	}
	p, err := m.conn.GetUnitTypePropertyContext(ctx, name, typ, "ControlGroup")
	if err != nil {
		return err
	}
	cgroup, _ := p.Value.Value().(string)
	root := m.caps.unifiedRoot()
	if root == "" {
		root = cgroupRoot + "/systemd"
	}
	if cgroup == "" {
		return nil // no cgroup: no processes
	}
	procs := filepath.Join(root, filepath.Clean("/"+cgroup), "cgroup.procs")
	// A safety net, not the bound waited on: a thread that stays in
	// uninterruptible sleep (a hung mount) must not hold a freeze, and
	// whatever waits behind it, for ever.
	ctx, cancel := context.WithTimeout(ctx, maxStopWait)
	defer cancel()
	// Stopping cannot be waited on from outside the process's parent (no
	// event tells it): look, and look again after a pause that grows to
	// 10ms, until all are stopped or ctx ends.
	for pause := 100 * time.Microsecond; ; pause = min(2*pause, 10*time.Millisecond) {
		running, err := runningIn(procs)
		if err != nil || running == "" {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s to stop: %w", running, ctx.Err())
		case <-time.After(pause):
		}
	}
}

// runningIn names a thread of a process listed in the cgroup.procs file
// procs that is not stopped ("" when there is none): one in state T
// (stopped), t (traced), Z or X (exited), or gone, is stopped; so is a
// vfork's parent, waiting for a child that is stopped (the kernel's
// freezers count it frozen too; waiting for it would wait for ever).
func runningIn(procs string) (string, error) {
	data, err := os.ReadFile(procs)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil // the cgroup went with its last process
	}
	if err != nil {
		return "", err
	}
	for _, pid := range strings.Fields(string(data)) {
		tasks, _ := os.ReadDir(filepath.Join("/proc", pid, "task"))
		for _, task := range tasks {
			stat, err := os.ReadFile(filepath.Join("/proc", pid, "task", task.Name(), "stat"))
			if err != nil {
				continue // exited
			}
			s := string(stat)
			// The command name, in parentheses, may hold anything: the
			// state follows the last ")".
			i := strings.LastIndexByte(s, ')')
			if i < 0 || i+2 >= len(s) {
				continue
			}
			st := s[i+2]
			if strings.ContainsRune("TtZX", rune(st)) || st == 'D' && inVfork(pid, task.Name()) {
				continue
			}
			return fmt.Sprintf("process %s (thread %s, state %c)", pid, task.Name(), st), nil
		}
	}
	return "", nil
}

// native freezes or thaws with systemd's FreezeUnit or ThawUnit.
func (m *Manager) native(ctx context.Context, name string, freeze bool) error {
	if freeze {
		return m.conn.FreezeUnit(ctx, name)
	}
	return m.conn.ThawUnit(ctx, name)
}

// inVfork says whether thread tid of pid, in uninterruptible sleep, waits
// for the child it vforked to exec or exit: its wait channel is
// wait_for_vfork_done, or the function it is inlined into (kernel_clone
// on Linux 6.x, _do_fork or do_fork before 5.10).
func inVfork(pid, tid string) bool {
	wchan, err := os.ReadFile(filepath.Join("/proc", pid, "task", tid, "wchan"))
	if err != nil {
		return false
	}
	switch string(wchan) {
	case "wait_for_vfork_done", "kernel_clone", "_do_fork", "do_fork":
		return true
	}
	return false
}
