package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/supervisor/admission"
	"github.com/sandboxd/sandboxd/units"
)

// ApplyUserLimits sets Config.SliceLimits on sandboxd.slice and
// Config.UserLimits on every owner's slice that exists, as the daemon
// starts: a bound an earlier configuration set
// and this one leaves out is lifted (systemd keeps a slice's limits for
// the boot), so that the configuration read is the one in force.
// Creates set them on the slices made later.
func (s *Supervisor) ApplyUserLimits(ctx context.Context) error {
	found, err := s.cfg.Units.List(ctx, units.OwnerSlices)
	if err != nil {
		return fmt.Errorf("applying the per-user limits: listing the users' slices: %w", err)
	}
	l := s.cfg.UserLimits
	none := uint64(math.MaxUint64) // systemd's infinity
	if l.MemoryMax == nil {
		l.MemoryMax = &none
	}
	if l.TasksMax == nil {
		l.TasksMax = &none
	}
	var errs []error
	// All sandboxes together first: the users' slices live under it.
	all := s.cfg.SliceLimits
	if all.MemoryMax == nil {
		all.MemoryMax = &none
	}
	if all.TasksMax == nil {
		all.TasksMax = &none
	}
	if err := s.cfg.Units.SetSliceLimits(ctx, units.SliceRoot, all); err != nil {
		errs = append(errs, err)
	}
	for _, u := range found {
		if !units.IsOwnerSlice(u.Name) {
			continue // a bucket of scopes (units.ScopeSlice): its owner's bounds hold it
		}
		if err := s.cfg.Units.SetSliceLimits(ctx, u.Name, l); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Usage is what one user holds of each bound on its sandboxes, and what
// all sandboxes together hold of theirs. A Max of 0 is no bound; an
// amount systemd does not know (accounting off) is not Known.
type Usage struct {
	// The user's slice (units.OwnerSlice) against Config.UserLimits,
	// and its live sandboxes against Policy.MaxPerOwner.
	Memory, Tasks           units.Amount
	MemoryMax, TasksMax     uint64
	Sandboxes, SandboxesMax int
	// sandboxd.slice against Config.SliceLimits, and every live sandbox
	// against Policy.MaxSandboxes.
	AllMemory, AllTasks           units.Amount
	AllMemoryMax, AllTasksMax     uint64
	AllSandboxes, AllSandboxesMax int
	// The MemoryMax promised to the live sandboxes, against
	// Policy.MaxMemory.
	Promised, PromisedMax uint64
}

// Usage reads uid's use of its bounds and the sandboxes' use of theirs:
// the slices' from systemd (a slice not made yet holds nothing), the
// counts from the records.
func (s *Supervisor) Usage(ctx context.Context, uid uint32) (Usage, error) {
	u := Usage{
		MemoryMax: deref(s.cfg.UserLimits.MemoryMax), TasksMax: deref(s.cfg.UserLimits.TasksMax),
		SandboxesMax: s.cfg.Policy.MaxPerOwner,
		AllMemoryMax: deref(s.cfg.SliceLimits.MemoryMax), AllTasksMax: deref(s.cfg.SliceLimits.TasksMax),
		AllSandboxesMax: s.cfg.Policy.MaxSandboxes, PromisedMax: s.cfg.Policy.MaxMemory,
	}
	for _, e := range admission.Live(s.cfg.Store.Entries()) {
		u.AllSandboxes++
		if e.Owner == uid {
			u.Sandboxes++
		}
		var l units.Limits
		if len(e.Limits) > 0 && json.Unmarshal(e.Limits, &l) == nil && l.MemoryMax != nil {
			u.Promised += *l.MemoryMax
		}
	}
	own, err := s.usage.read(ctx, s.cfg.Units, units.OwnerSlice(uid))
	if err != nil {
		return u, fmt.Errorf("the usage of uid %d: %w", uid, err)
	}
	all, err := s.usage.read(ctx, s.cfg.Units, units.SliceRoot)
	if err != nil {
		return u, fmt.Errorf("the usage of all sandboxes: %w", err)
	}
	u.Memory, u.Tasks, u.AllMemory, u.AllTasks = own.Memory, own.Tasks, all.Memory, all.Tasks
	if !own.Loaded { // no sandbox of the user's has run this boot
		u.Memory, u.Tasks = units.Amount{Known: true}, units.Amount{Known: true}
	}
	return u, nil
}

// SliceUsageTTL is how old a slice's usage in Usage may be. A reading
// of both slices is four calls to systemd, which answers each with every
// property of the unit: 1.5 ms of systemd's time a GetLimits, measured,
// and GetLimits is a light call any member may make without end (256
// connections, 128 calls under way on each). Read at most once a TTL a
// slice, one reading at a time, a flood of them costs systemd next to
// nothing (sandboxctl limits is read by people and agents, for whom a
// second is fresh).
const SliceUsageTTL = time.Second

// sliceUsageCache holds the slices' usage lately read.
type sliceUsageCache struct {
	mu sync.Mutex // held while systemd is asked: one reading at a time
	m  map[string]sliceUsageRead
}

type sliceUsageRead struct {
	u  units.SliceUsage
	at time.Time
}

// read is slice name's usage, read from systemd (u) at most
// SliceUsageTTL ago.
func (c *sliceUsageCache) read(ctx context.Context, u Units, name string) (units.SliceUsage, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	if r, ok := c.m[name]; ok && now.Sub(r.at) < SliceUsageTTL && now.After(r.at) {
		return r.u, nil
	}
	got, err := u.SliceUsage(ctx, name)
	if err != nil {
		return got, err
	}
	// Only the slices read lately are kept: at most one a user asking.
	for k, r := range c.m {
		if now.Sub(r.at) >= SliceUsageTTL {
			delete(c.m, k)
		}
	}
	if c.m == nil {
		c.m = map[string]sliceUsageRead{}
	}
	c.m[name] = sliceUsageRead{u: got, at: now}
	return got, nil
}

func deref(p *uint64) uint64 {
	if p == nil {
		return 0
	}
	return *p
}
