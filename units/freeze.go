package units

import (
	"context"
	"fmt"
	"strings"
	"syscall"

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
	return nil
}

// native freezes or thaws with systemd's FreezeUnit or ThawUnit.
func (m *Manager) native(ctx context.Context, name string, freeze bool) error {
	if freeze {
		return m.conn.FreezeUnit(ctx, name)
	}
	return m.conn.ThawUnit(ctx, name)
}
