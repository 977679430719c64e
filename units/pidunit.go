package units

import (
	"context"
	"fmt"
	"strings"
)

// ProcessUnit is the unit systemd says a process is of, and what decides
// whether the process's service may be stopped and started for it.
type ProcessUnit struct {
	// Name is the unit whose cgroup holds the process (for a process in
	// a delegated subtree: the unit that was delegated it, such as
	// user@1000.service or a sandbox's scope).
	Name string
	// ActiveState is systemd's, read with the name: "active", "inactive",
	// "activating", ...
	ActiveState string
	// Delegate: the unit's cgroup subtree is its processes' to divide
	// (Delegate=yes): the names below it are theirs, not systemd's.
	Delegate bool
	// ControlGroup is the unit's cgroup ("/system.slice/x.service"), and
	// Slice the slice it is in.
	ControlGroup, Slice string
}

// UnitOfPID asks systemd which unit process pid is of (GetUnitByPID), and
// reads that unit's state, delegation and cgroup. The answer is
// systemd's own accounting, never a name a process could have given a
// cgroup it made.
func (m *Manager) UnitOfPID(ctx context.Context, pid int) (ProcessUnit, error) {
	const op = "finding the unit of pid"
	if pid <= 0 || pid > 1<<22 {
		return ProcessUnit{}, fmt.Errorf("%s %d: not a process id", op, pid)
	}
	name, err := m.conn.GetUnitNameByPID(ctx, uint32(pid))
	if err != nil {
		return ProcessUnit{}, wrap(op, fmt.Sprint(pid), err)
	}
	u := ProcessUnit{Name: name}
	props, err := m.conn.GetUnitPropertiesContext(ctx, name)
	if err != nil {
		return u, wrap("reading the state of", name, err)
	}
	u.ActiveState, _ = props["ActiveState"].(string)
	// Delegate, ControlGroup and Slice are on the type's interface
	// (Service, Scope, Slice, Socket, Mount, Swap); others have no
	// cgroup a process could be in.
	kind := name[strings.LastIndexByte(name, '.')+1:]
	switch kind {
	case "service", "scope", "slice", "socket", "mount", "swap":
	default:
		return u, nil
	}
	typed, err := m.conn.GetUnitTypePropertiesContext(ctx, name, strings.ToUpper(kind[:1])+kind[1:])
	if err != nil {
		return u, wrap("reading the cgroup of", name, err)
	}
	u.Delegate, _ = typed["Delegate"].(bool)
	u.ControlGroup, _ = typed["ControlGroup"].(string)
	u.Slice, _ = typed["Slice"].(string)
	return u, nil
}
