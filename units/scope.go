package units

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"syscall"
	"time"

	sdbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
	"golang.org/x/sys/unix"
)

// Scope describes a transient scope to start.
type Scope struct {
	// Name is the unit's name, such as "sandbox-1f3a.scope" (see
	// CheckScopeName).
	Name string
	// Description is what systemctl shows for it.
	Description string
	// PIDs are the processes systemd moves into the scope; at least one.
	// Their children from then on are born inside.
	PIDs []int
	// Slice is the slice to put the scope under ("" for systemd's default,
	// system.slice).
	Slice string
	// Limits are its resource limits.
	Limits Limits
	// StopTimeout is how long Stop waits after SIGTERM before SIGKILL (0
	// for systemd's default, 90s).
	StopTimeout time.Duration
	// Devices, when not nil, closes the scope's device cgroup
	// (DevicePolicy=closed: /dev/null, zero, full, random and urandom
	// only) but for these (DeviceAllow): whatever device node its
	// processes find or make, they open nothing else.
	Devices []Device
	// Delegate: the scope's cgroup subtree is its processes' to manage
	// (Delegate=yes): a booted sandbox's systemd makes its own below it.
	Delegate bool
}

// Device is a DeviceAllow entry: a device node's path or a class
// ("char-pts"), and the access allowed, some of "rwm".
type Device struct {
	Path, Access string
}

// SandboxDevices are the devices a sandbox's /dev holds, besides those
// DevicePolicy=closed allows: terminals and pseudo-terminals.
var SandboxDevices = []Device{{"/dev/tty", "rw"}, {"/dev/ptmx", "rw"}, {"char-pts", "rw"}}

// Check refuses a spec systemd would refuse or that makes no sense:
// what StartScope refuses before asking systemd anything.
func (s Scope) Check() error {
	if err := CheckScopeName(s.Name); err != nil {
		return err
	}
	if s.Slice != "" {
		if err := CheckSliceName(s.Slice); err != nil {
			return fmt.Errorf("slice: %w", err)
		}
	}
	if len(s.PIDs) == 0 {
		return errors.New("no processes to put in it: a scope needs at least one pid")
	}
	for _, pid := range s.PIDs {
		if pid <= 0 || pid > math.MaxUint32 {
			return fmt.Errorf("pid %d is not a process id", pid)
		}
	}
	for _, d := range s.Devices {
		ok := strings.HasPrefix(d.Path, "/dev/") || strings.HasPrefix(d.Path, "char-") || strings.HasPrefix(d.Path, "block-")
		if !ok || d.Access == "" || strings.Trim(d.Access, "rwm") != "" {
			return fmt.Errorf("device %q with access %q: want a /dev/ path, char-CLASS or block-CLASS, and some of \"rwm\"", d.Path, d.Access)
		}
	}
	if s.StopTimeout < 0 {
		return fmt.Errorf("StopTimeout is %v; want 0 (systemd's default) or more", s.StopTimeout)
	}
	return s.Limits.Validate()
}

func (s Scope) properties() []sdbus.Property {
	pids := make([]uint32, len(s.PIDs))
	for i, pid := range s.PIDs {
		pids[i] = uint32(pid)
	}
	props := []sdbus.Property{
		sdbus.PropPids(pids...),
		sdbus.PropDescription(s.Description),
		// Accounting on, so that Usage has numbers to read.
		boolProp("MemoryAccounting", true),
		boolProp("CPUAccounting", true),
		boolProp("TasksAccounting", true),
	}
	if s.Slice != "" {
		props = append(props, sdbus.PropSlice(s.Slice))
	}
	if s.StopTimeout > 0 {
		props = append(props, sdbus.Property{Name: "TimeoutStopUSec", Value: dbus.MakeVariant(uint64(s.StopTimeout.Microseconds()))})
	}
	if s.Devices != nil {
		allow := make([]struct{ Path, Access string }, len(s.Devices))
		for i, d := range s.Devices {
			allow[i] = struct{ Path, Access string }{d.Path, d.Access}
		}
		props = append(props,
			sdbus.Property{Name: "DevicePolicy", Value: dbus.MakeVariant("closed")},
			sdbus.Property{Name: "DeviceAllow", Value: dbus.MakeVariant(allow)})
	}
	if s.Delegate {
		props = append(props, boolProp("Delegate", true))
	}
	return append(props, s.Limits.properties()...)
}

func boolProp(name string, v bool) sdbus.Property {
	return sdbus.Property{Name: name, Value: dbus.MakeVariant(v)}
}

// StartScope starts a transient scope holding s.PIDs, with s.Limits, and
// waits for systemd's job to finish. A name that is already loaded (running,
// or failed and not yet reset) gives ErrExists; a job that ends other than
// "done" gives a *JobError. Nothing is asked of systemd when s is invalid
// (ErrInvalidName, ErrInvalidLimits).
//
// If ctx ends while the job runs, the error wraps ctx.Err() and the scope
// may still come up: stop it.
func (m *Manager) StartScope(ctx context.Context, s Scope) error {
	return m.startScope(ctx, s)
}

// startScope is StartScope with extra properties, for tests that need a
// job to fail.
func (m *Manager) startScope(ctx context.Context, s Scope, extra ...sdbus.Property) error {
	const op = "starting scope"
	if err := s.Check(); err != nil {
		return fmt.Errorf("%s %s: %w", op, s.Name, err)
	}
	done := jobResult()
	if _, err := m.conn.StartTransientUnitContext(ctx, s.Name, "fail", append(s.properties(), extra...), done); err != nil {
		return wrap(op, s.Name, err)
	}
	return waitJob(ctx, op, s.Name, done)
}

// jobResult makes the channel go-systemd sends a job's result on. It must
// have room for the result: go-systemd sends it from its signal loop while
// holding its job table's lock, so a send that blocks stops every later
// job. The lock also makes it safe for the job to end before the method
// call returns: the result waits until the channel is registered.
func jobResult() chan string { return make(chan string, 1) }

// waitJob waits for a job's result; anything but "done" is a *JobError.
func waitJob(ctx context.Context, op, unit string, done <-chan string) error {
	select {
	case result := <-done:
		if result != "done" {
			return &JobError{Op: op, Unit: unit, Result: result}
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%s %s: waiting for the job: %w", op, unit, ctx.Err())
	}
}

// Stop stops the scope and waits for it: systemd sends SIGTERM (and
// SIGCONT) to its processes, then SIGKILL after the stop timeout. A scope
// stopped cleanly goes away; one that needed SIGKILL ends failed (result
// "timeout") and stays listed until ResetFailed.
func (m *Manager) Stop(ctx context.Context, name string) error {
	const op = "stopping scope"
	if err := CheckScopeName(name); err != nil {
		return fmt.Errorf("%s %s: %w", op, name, err)
	}
	return m.job(ctx, op, name, m.conn.StopUnitContext)
}

// Kill sends sig to every process of the scope. The scope itself stays
// until its last process is gone.
func (m *Manager) Kill(ctx context.Context, name string, sig syscall.Signal) error {
	op := "sending " + unix.SignalName(sig) + " to scope"
	if err := CheckScopeName(name); err != nil {
		return fmt.Errorf("%s %s: %w", op, name, err)
	}
	if err := m.conn.KillUnitWithTarget(ctx, name, sdbus.All, int32(sig)); err != nil {
		return wrap(op, name, err)
	}
	return nil
}

// ResetFailed lets systemd forget a failed scope (one that hit RuntimeMax,
// or needed SIGKILL to stop), so that it goes away and its name can be
// used again. On a scope that has not failed it does nothing.
func (m *Manager) ResetFailed(ctx context.Context, name string) error {
	const op = "resetting failed scope"
	if err := CheckScopeName(name); err != nil {
		return fmt.Errorf("%s %s: %w", op, name, err)
	}
	if err := m.conn.ResetFailedUnitContext(ctx, name); err != nil {
		return wrap(op, name, err)
	}
	return nil
}
