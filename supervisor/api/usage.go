package api

import (
	"encoding/json"

	"github.com/godbus/dbus/v5"

	"github.com/sandboxd/sandboxd/sandboxd1"
	"github.com/sandboxd/sandboxd/units"
)

// GetLimits() → (tttttttttttttt): what the caller uses of the bounds on
// its sandboxes (its slice's memory and tasks, its live sandboxes), and
// what all sandboxes use of theirs. Any caller the bus lets in may ask,
// of its own uid only: the totals of all say nothing of one other user.
func (m manager) GetLimits(sender dbus.Sender) (sandboxd1.Limits, *dbus.Error) {
	s := m.s
	r, derr := s.begin(sender, sandboxd1.MethodGetLimits)
	if derr != nil {
		return sandboxd1.Limits{}, derr
	}
	if s.rooms.Limits == nil {
		return sandboxd1.Limits{}, s.end(r, "", dbusError(sandboxd1.ErrorFailed, "the limits of uid %d: they are not served here", r.who.UID))
	}
	u, err := s.rooms.Limits.Usage(r.ctx, r.who.UID)
	if err != nil {
		return sandboxd1.Limits{}, s.end(r, "", fromSupervisor(err))
	}
	known := func(a units.Amount) uint64 {
		if !a.Known {
			return sandboxd1.Unknown
		}
		return a.Value
	}
	return sandboxd1.Limits{
		Memory: known(u.Memory), MemoryMax: u.MemoryMax,
		Tasks: known(u.Tasks), TasksMax: u.TasksMax,
		Sandboxes: uint64(u.Sandboxes), SandboxesMax: uint64(u.SandboxesMax),
		AllMemory: known(u.AllMemory), AllMemoryMax: u.AllMemoryMax,
		AllTasks: known(u.AllTasks), AllTasksMax: u.AllTasksMax,
		AllSandboxes: uint64(u.AllSandboxes), AllSandboxesMax: uint64(u.AllSandboxesMax),
		Promised: u.Promised, PromisedMax: u.PromisedMax,
	}, s.end(r, "", nil)
}

// ListPools() → s: the warm pools the caller may see, a JSON array of
// sandboxd1.Pool (its own; root's and admins' every owner's).
func (m manager) ListPools(sender dbus.Sender) (string, *dbus.Error) {
	s := m.s
	r, derr := s.begin(sender, sandboxd1.MethodListPools)
	if derr != nil {
		return "", derr
	}
	out := []sandboxd1.Pool{}
	if s.rooms.Pools != nil {
		for _, p := range s.rooms.Pools.List(0, true) {
			if r.who.Sees(p.Owner) {
				out = append(out, p)
			}
		}
	}
	b, err := json.Marshal(out)
	if err != nil {
		return "", s.end(r, "", fromSupervisor(err))
	}
	return string(b), s.end(r, "", nil)
}
