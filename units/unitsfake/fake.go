package unitsfake

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/sandboxd/sandboxd/units"
)

// Manager is the fake systemd. The zero value is not usable: New.
type Manager struct {
	mu    sync.Mutex
	units map[string]*unit
	pids  map[int]units.ProcessUnit // what SetPIDUnit said
	calls []Call

	hookMu sync.Mutex
	fails  map[[2]string]error
	hook   func(method, name string) error
}

// unit is one loaded unit, of any type.
type unit struct {
	state units.UnitState
	// A scope's spec, as started, and the amounts a test set.
	scope  units.Scope
	usage  units.Usage
	frozen bool
	// A slice's limits, as set; explicit: started by SetSliceLimits, not
	// only loaded for the scopes placed in it.
	limits   units.Limits
	explicit bool
	// A mount unit's.
	what, where string
	// A service's environment.
	env []string
}

// Unit is what the fake holds of one unit, for a test to look at.
type Unit struct {
	units.UnitState
	// Scope is a scope's spec, as StartScope was given it; Frozen says
	// whether Freeze stopped it (or a service) and Thaw did not resume it.
	Scope  units.Scope
	Frozen bool
	// Limits are a slice's, as SetSliceLimits set them.
	Limits units.Limits
	// What and Where are a mount unit's.
	What, Where string
	// Env is a service's environment.
	Env []string
}

// Call is one call made of the fake, by method and the name it acts on
// (as Fail names them).
type Call struct {
	Method, Name string
}

// New returns a fake with no unit loaded.
func New() *Manager {
	return &Manager{units: map[string]*unit{}, pids: map[int]units.ProcessUnit{}}
}

// Fail makes every later call of method ("StartScope", "Stop", ...) on
// name fail with err, returned as is (a units sentinel, a
// *units.JobError); nil err ends it. name is the unit's name (a mount
// unit's for BindMount, PoolMount and RemoveMount: units.MountUnitName),
// the pid in decimal for UnitOfPID, the patterns joined by " " for List,
// or "" for any.
func (m *Manager) Fail(method, name string, err error) {
	m.hookMu.Lock()
	defer m.hookMu.Unlock()
	if m.fails == nil {
		m.fails = map[[2]string]error{}
	}
	if err == nil {
		delete(m.fails, [2]string{method, name})
		return
	}
	m.fails[[2]string{method, name}] = err
}

// SetHook sets a function asked before every call, with its method and
// name (as Fail names them), outside the fake's lock: what it returns,
// if not nil, is the call's error. It may block, to hold a call.
func (m *Manager) SetHook(hook func(method, name string) error) {
	m.hookMu.Lock()
	defer m.hookMu.Unlock()
	m.hook = hook
}

// enter logs a call, runs the failures and hook set for it, then takes
// the lock; the caller unlocks.
func (m *Manager) enter(ctx context.Context, method, name string) error {
	m.mu.Lock()
	m.calls = append(m.calls, Call{method, name})
	m.mu.Unlock()
	m.hookMu.Lock()
	err := m.fails[[2]string{method, name}]
	if err == nil {
		err = m.fails[[2]string{method, ""}]
	}
	hook := m.hook
	m.hookMu.Unlock()
	if err == nil && hook != nil {
		err = hook(method, name)
	}
	if err == nil && ctx.Err() != nil {
		err = fmt.Errorf("%s %s: %w", method, name, ctx.Err())
	}
	if err != nil {
		return err
	}
	m.mu.Lock()
	return nil
}

// Calls lists the calls made so far, in order, failed ones included.
func (m *Manager) Calls() []Call {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.calls)
}

// Unit returns the loaded unit name (a slice loaded only because a
// scope is placed in it included).
func (m *Manager) Unit(name string) (Unit, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	u := m.loaded()[name]
	if u == nil {
		return Unit{}, false
	}
	return Unit{UnitState: u.state, Scope: cloneScope(u.scope), Frozen: u.frozen, Limits: cloneLimits(u.limits),
		What: u.what, Where: u.where, Env: slices.Clone(u.env)}, true
}

// AddService loads service name (a host service, as units.CheckServiceName
// takes it) in activeState ("active", "inactive", ...), with env as
// ServiceEnvironment reads it.
func (m *Manager) AddService(name, activeState string, env ...string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.units[name] = &unit{state: units.UnitState{Name: name, ActiveState: activeState, SubState: subOf(activeState)}, env: slices.Clone(env)}
}

// SetState sets a loaded unit's state as systemd would show it: a scope
// that hit its RuntimeMax is "failed", "failed" (and stays loaded until
// ResetFailed). A unit not loaded is units.ErrNotFound.
func (m *Manager) SetState(name, activeState, subState string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	u := m.units[name]
	if u == nil {
		return fmt.Errorf("setting the state of %s: %w", name, units.ErrNotFound)
	}
	u.state.ActiveState, u.state.SubState = activeState, subState
	return nil
}

// End unloads a unit, as the end of a scope's last process does.
func (m *Manager) End(name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.units, name)
}

// SetUsage sets the amounts (Memory, CPU, Tasks, Result) Usage reports
// for scope name, and SliceUsage sums for the slices above it. A scope
// not loaded is units.ErrNotFound.
func (m *Manager) SetUsage(name string, u units.Usage) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.units[name]
	if s == nil || !strings.HasSuffix(name, ".scope") {
		return fmt.Errorf("setting the usage of %s: %w", name, units.ErrNotFound)
	}
	s.usage = u
	return nil
}

// SetPIDUnit says which unit pid is of, for UnitOfPID, before what the
// scopes' pids say.
func (m *Manager) SetPIDUnit(pid int, u units.ProcessUnit) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.pids[pid] = u
}

// loaded is every loaded unit: those made, and the slices the scopes'
// placement loads (a slice and each above it, "a-b.slice" above
// "a-b-c.slice"), which systemd unloads once they hold nothing.
func (m *Manager) loaded() map[string]*unit {
	all := maps.Clone(m.units)
	for _, u := range m.units {
		for _, s := range sliceChain(u.scope.Slice) {
			if all[s] == nil {
				all[s] = &unit{state: units.UnitState{Name: s, ActiveState: "active", SubState: "active"}}
			}
		}
	}
	return all
}

// sliceChain is slice and the slices above it, nearest first (none for "").
func sliceChain(slice string) []string {
	var chain []string
	for prefix, ok := strings.CutSuffix(slice, ".slice"); ok && prefix != ""; {
		chain = append(chain, prefix+".slice")
		i := strings.LastIndexByte(prefix, '-')
		if i <= 0 {
			break
		}
		prefix = prefix[:i]
	}
	return chain
}

// cgroupOf is the cgroup systemd gives a unit in slice: its slices'
// directories from the top, then its own.
func cgroupOf(name, slice string) string {
	chain := sliceChain(slice)
	slices.Reverse(chain)
	return "/" + strings.Join(append(chain, name), "/")
}

func subOf(activeState string) string {
	switch activeState {
	case "active":
		return "running"
	case "inactive":
		return "dead"
	}
	return activeState
}

func cloneScope(s units.Scope) units.Scope {
	s.PIDs = slices.Clone(s.PIDs)
	s.Devices = slices.Clone(s.Devices)
	s.Limits = cloneLimits(s.Limits)
	return s
}

// cloneLimits copies what l's fields point to: the fake keeps its own,
// as systemd does.
func cloneLimits(l units.Limits) units.Limits {
	cp := func(p *uint64) *uint64 {
		if p == nil {
			return nil
		}
		return new(*p)
	}
	if l.CPUQuota != nil {
		l.CPUQuota = new(*l.CPUQuota)
	}
	if l.RuntimeMax != nil {
		l.RuntimeMax = new(*l.RuntimeMax)
	}
	l.CPUWeight, l.MemoryMax, l.MemoryHigh = cp(l.CPUWeight), cp(l.MemoryMax), cp(l.MemoryHigh)
	l.MemorySwapMax, l.TasksMax, l.IOWeight = cp(l.MemorySwapMax), cp(l.TasksMax), cp(l.IOWeight)
	return l
}
