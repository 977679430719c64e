package unitsfake

import (
	"context"
	"fmt"
	"maps"
	"math"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/sandboxd/sandboxd/units"
)

// StartScope loads scope s.Name, active and running. A spec units refuses
// is refused the same; a name already loaded is units.ErrExists.
func (m *Manager) StartScope(ctx context.Context, s units.Scope) error {
	const op = "starting scope"
	if err := m.enter(ctx, "StartScope", s.Name); err != nil {
		return err
	}
	defer m.mu.Unlock()
	if err := s.Check(); err != nil {
		return fmt.Errorf("%s %s: %w", op, s.Name, err)
	}
	if m.units[s.Name] != nil {
		return fmt.Errorf("%s %s: %w", op, s.Name, units.ErrExists)
	}
	m.units[s.Name] = &unit{
		state: units.UnitState{Name: s.Name, Description: s.Description, ActiveState: "active", SubState: "running"},
		scope: cloneScope(s),
	}
	return nil
}

// scopeOrService checks name as Freeze and Thaw do.
func scopeOrService(name string) error {
	if strings.HasSuffix(name, ".service") {
		return units.CheckServiceName(name)
	}
	return units.CheckScopeName(name)
}

// Stop unloads a scope; a failed one stays loaded, failed, until
// ResetFailed, as systemd keeps it.
func (m *Manager) Stop(ctx context.Context, name string) error {
	const op = "stopping scope"
	if err := m.enter(ctx, "Stop", name); err != nil {
		return err
	}
	defer m.mu.Unlock()
	if err := units.CheckScopeName(name); err != nil {
		return fmt.Errorf("%s %s: %w", op, name, err)
	}
	u := m.units[name]
	if u == nil {
		return fmt.Errorf("%s %s: %w", op, name, units.ErrNotFound)
	}
	if u.state.ActiveState == "failed" {
		u.frozen = false
		return nil
	}
	delete(m.units, name)
	return nil
}

func (m *Manager) Freeze(ctx context.Context, name string) error {
	return m.freezeOrThaw(ctx, "Freeze", "freezing", name, true)
}

func (m *Manager) Thaw(ctx context.Context, name string) error {
	return m.freezeOrThaw(ctx, "Thaw", "thawing", name, false)
}

func (m *Manager) freezeOrThaw(ctx context.Context, method, op, name string, freeze bool) error {
	if err := m.enter(ctx, method, name); err != nil {
		return err
	}
	defer m.mu.Unlock()
	if err := scopeOrService(name); err != nil {
		return fmt.Errorf("%s %s: %w", op, name, err)
	}
	u := m.units[name]
	if u == nil {
		return fmt.Errorf("%s %s: %w", op, name, units.ErrNotFound)
	}
	if u.state.ActiveState != "active" {
		return fmt.Errorf("%s %s: the unit is %s, not active", op, name, u.state.ActiveState)
	}
	u.frozen = freeze
	return nil
}

// Usage reports a scope's state and limits, and the amounts SetUsage set
// (unknown until then).
func (m *Manager) Usage(ctx context.Context, name string) (units.Usage, error) {
	const op = "reading usage of scope"
	if err := m.enter(ctx, "Usage", name); err != nil {
		return units.Usage{}, err
	}
	defer m.mu.Unlock()
	if err := units.CheckScopeName(name); err != nil {
		return units.Usage{}, fmt.Errorf("%s %s: %w", op, name, err)
	}
	u := m.units[name]
	if u == nil {
		return units.Usage{}, fmt.Errorf("%s %s: %w (load state %q)", op, name, units.ErrNotFound, "not-found")
	}
	us := u.usage
	us.ActiveState, us.SubState = u.state.ActiveState, u.state.SubState
	if us.Result == "" {
		us.Result = "success"
	}
	us.Limits = cloneLimits(u.scope.Limits)
	return us, nil
}

// ResetFailed unloads a failed scope; on one that has not failed it does
// nothing.
func (m *Manager) ResetFailed(ctx context.Context, name string) error {
	const op = "resetting failed scope"
	if err := m.enter(ctx, "ResetFailed", name); err != nil {
		return err
	}
	defer m.mu.Unlock()
	if err := units.CheckScopeName(name); err != nil {
		return fmt.Errorf("%s %s: %w", op, name, err)
	}
	u := m.units[name]
	if u == nil {
		return fmt.Errorf("%s %s: %w", op, name, units.ErrNotFound)
	}
	if u.state.ActiveState == "failed" {
		delete(m.units, name)
	}
	return nil
}

// List lists the loaded units matching any of patterns (shell globs, as
// systemd matches them: unit names hold no "/"), all with none, by name.
func (m *Manager) List(ctx context.Context, patterns ...string) ([]units.UnitState, error) {
	if err := m.enter(ctx, "List", strings.Join(patterns, " ")); err != nil {
		return nil, err
	}
	defer m.mu.Unlock()
	for _, p := range patterns {
		if _, err := path.Match(p, ""); err != nil {
			return nil, fmt.Errorf("listing units matching %q: %w", p, err)
		}
	}
	all := m.loaded()
	var out []units.UnitState
	for _, name := range slices.Sorted(maps.Keys(all)) {
		if len(patterns) == 0 || slices.ContainsFunc(patterns, func(p string) bool { ok, _ := path.Match(p, name); return ok }) {
			out = append(out, all[name].state)
		}
	}
	return out, nil
}

// SetSliceLimits starts slice name with l, or sets l's set fields on it
// (the others stay as they were); limits with nothing set ask nothing.
func (m *Manager) SetSliceLimits(ctx context.Context, name string, l units.Limits) error {
	const op = "limiting slice"
	if err := m.enter(ctx, "SetSliceLimits", name); err != nil {
		return err
	}
	defer m.mu.Unlock()
	if err := units.CheckSliceName(name); err != nil {
		return fmt.Errorf("%s %s: %w", op, name, err)
	}
	if l == (units.Limits{}) {
		return nil
	}
	u := m.units[name]
	if u == nil {
		desc := "sandboxd: the sandboxes of one user"
		if name == units.SliceRoot {
			desc = "sandboxd: all sandboxes"
		}
		u = &unit{state: units.UnitState{Name: name, Description: desc, ActiveState: "active", SubState: "active"}}
		m.units[name] = u
	}
	u.explicit = true
	l = cloneLimits(l)
	set := func(dst **uint64, src *uint64) {
		if src != nil {
			*dst = src
		}
	}
	set(&u.limits.CPUWeight, l.CPUWeight)
	set(&u.limits.MemoryMax, l.MemoryMax)
	set(&u.limits.MemoryHigh, l.MemoryHigh)
	set(&u.limits.MemorySwapMax, l.MemorySwapMax)
	set(&u.limits.TasksMax, l.TasksMax)
	set(&u.limits.IOWeight, l.IOWeight)
	if l.CPUQuota != nil {
		u.limits.CPUQuota = l.CPUQuota
	}
	if l.RuntimeMax != nil {
		u.limits.RuntimeMax = l.RuntimeMax
	}
	return nil
}

// SliceUsage sums the amounts SetUsage set for the scopes below slice
// name, with its limits (infinity read as none, as units reads it); a
// slice not loaded holds nothing.
func (m *Manager) SliceUsage(ctx context.Context, name string) (units.SliceUsage, error) {
	const op = "reading usage of slice"
	if err := m.enter(ctx, "SliceUsage", name); err != nil {
		return units.SliceUsage{}, err
	}
	defer m.mu.Unlock()
	if err := units.CheckSliceName(name); err != nil {
		return units.SliceUsage{}, fmt.Errorf("%s %s: %w", op, name, err)
	}
	s := m.loaded()[name]
	if s == nil {
		return units.SliceUsage{}, nil
	}
	su := units.SliceUsage{Loaded: true, Memory: units.Amount{Known: true}, Tasks: units.Amount{Known: true}, Limits: cloneLimits(s.limits)}
	for _, u := range m.units {
		if slices.Contains(sliceChain(u.scope.Slice), name) {
			su.Memory.Value += u.usage.Memory.Value
			su.Tasks.Value += u.usage.Tasks.Value
		}
	}
	for _, p := range []**uint64{&su.Limits.MemoryMax, &su.Limits.TasksMax, &su.Limits.MemoryHigh, &su.Limits.MemorySwapMax} {
		if *p != nil && **p == math.MaxUint64 {
			*p = nil
		}
	}
	return su, nil
}

// mountPaths checks what and where as units does before writing a unit.
func mountPaths(op string, paths ...string) error {
	for _, p := range paths {
		if !filepath.IsAbs(p) || filepath.Clean(p) != p || strings.ContainsAny(p, "\n\r\x00\\") {
			return fmt.Errorf("%s: %q is not a path a unit file can hold", op, p)
		}
	}
	return nil
}

// BindMount loads the mount unit that binds what at where, active, and
// returns its name; called again, it binds what anew.
func (m *Manager) BindMount(ctx context.Context, what, where string) (string, error) {
	return m.mount(ctx, "BindMount", "binding a volume", "sandboxd project at ", what, where)
}

// PoolMount loads the mount unit of the pool's image at where, and
// returns its name.
func (m *Manager) PoolMount(ctx context.Context, image, where string) (string, error) {
	return m.mount(ctx, "PoolMount", "mounting the pool at boot", "sandboxd pool at ", image, where)
}

func (m *Manager) mount(ctx context.Context, method, op, desc, what, where string) (string, error) {
	name := units.MountUnitName(where)
	if err := m.enter(ctx, method, name); err != nil {
		return name, err
	}
	defer m.mu.Unlock()
	if err := mountPaths(op, what, where); err != nil {
		return name, err
	}
	m.units[name] = &unit{state: units.UnitState{Name: name, Description: desc + where, ActiveState: "active", SubState: "mounted"},
		what: what, where: where}
	return name, nil
}

// RemoveMount unloads the mount unit of where; one not there is no error.
func (m *Manager) RemoveMount(ctx context.Context, where string) error {
	name := units.MountUnitName(where)
	if err := m.enter(ctx, "RemoveMount", name); err != nil {
		return err
	}
	defer m.mu.Unlock()
	delete(m.units, name)
	return nil
}

// StopService makes a service AddService loaded inactive.
func (m *Manager) StopService(ctx context.Context, name string) error {
	return m.service(ctx, "StopService", "stopping service", name, "inactive")
}

// StartService makes a service AddService loaded active.
func (m *Manager) StartService(ctx context.Context, name string) error {
	return m.service(ctx, "StartService", "starting service", name, "active")
}

func (m *Manager) service(ctx context.Context, method, op, name, state string) error {
	if err := m.enter(ctx, method, name); err != nil {
		return err
	}
	defer m.mu.Unlock()
	if err := units.CheckServiceName(name); err != nil {
		return fmt.Errorf("%s %s: %w", op, name, err)
	}
	u := m.units[name]
	if u == nil {
		return fmt.Errorf("%s %s: %w", op, name, units.ErrNotFound)
	}
	u.state.ActiveState, u.state.SubState, u.frozen = state, subOf(state), false
	return nil
}

// ServiceEnvironment returns the environment AddService gave a service
// (what supervisor reads for a project that names units).
func (m *Manager) ServiceEnvironment(ctx context.Context, name string) ([]string, error) {
	const op = "reading the environment of service"
	if err := m.enter(ctx, "ServiceEnvironment", name); err != nil {
		return nil, err
	}
	defer m.mu.Unlock()
	if err := units.CheckServiceName(name); err != nil {
		return nil, fmt.Errorf("%s %s: %w", op, name, err)
	}
	u := m.units[name]
	if u == nil {
		return nil, fmt.Errorf("%s %s: %w", op, name, units.ErrNotFound)
	}
	return slices.Clone(u.env), nil
}

// UnitOfPID answers from SetPIDUnit's table, then from the pids of the
// scopes loaded. systemd's answer for another pid ("does not belong to
// any loaded unit") maps to no sentinel: neither does the fake's.
func (m *Manager) UnitOfPID(ctx context.Context, pid int) (units.ProcessUnit, error) {
	const op = "finding the unit of pid"
	if err := m.enter(ctx, "UnitOfPID", strconv.Itoa(pid)); err != nil {
		return units.ProcessUnit{}, err
	}
	defer m.mu.Unlock()
	if pid <= 0 || pid > 1<<22 {
		return units.ProcessUnit{}, fmt.Errorf("%s %d: not a process id", op, pid)
	}
	if u, ok := m.pids[pid]; ok {
		return u, nil
	}
	for _, name := range slices.Sorted(maps.Keys(m.units)) {
		u := m.units[name]
		if slices.Contains(u.scope.PIDs, pid) {
			slice := u.scope.Slice
			if slice == "" {
				slice = "system.slice"
			}
			return units.ProcessUnit{Name: name, ActiveState: u.state.ActiveState, Delegate: u.scope.Delegate,
				ControlGroup: cgroupOf(name, slice), Slice: slice}, nil
		}
	}
	return units.ProcessUnit{}, fmt.Errorf("%s %d: %w", op, pid, errNoUnit{pid})
}

// errNoUnit is systemd's NoUnitForPID.
type errNoUnit struct{ pid int }

func (e errNoUnit) Error() string {
	return fmt.Sprintf("PID %d does not belong to any loaded unit", e.pid)
}
