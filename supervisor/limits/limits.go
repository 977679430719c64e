package limits

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/supervisor"
	"github.com/sandboxd/sandboxd/supervisor/admission"
	"github.com/sandboxd/sandboxd/units"
)

// Host is what the room needs of the core: its Host, and the admission
// policy in force (the caps Usage reports against).
type Host interface {
	supervisor.Host
	Policy() supervisor.Policy
}

// Config is the bounds the room sets and reports.
type Config struct {
	// UserLimits bound all of one owner's sandboxes together, on the
	// owner's slice (units.OwnerSlice); the core sets them too, before
	// each of the owner's scopes starts (its Config.UserLimits, the same).
	UserLimits units.Limits
	// SliceLimits bound all sandboxes together, set on sandboxd.slice
	// (units.SliceRoot) as the daemon starts; nothing set: no bound.
	SliceLimits units.Limits
}

// Limits is the room: the bounds and the slices' usage lately read.
type Limits struct {
	h     Host
	cfg   Config
	usage sliceUsageCache
}

// New makes the room over h. It joins no hook: the daemon calls
// ApplyUserLimits as it starts.
func New(h Host, cfg Config) *Limits {
	return &Limits{h: h, cfg: cfg, usage: sliceUsageCache{now: time.Now}}
}

// ApplyUserLimits sets Config.SliceLimits on sandboxd.slice and
// Config.UserLimits on every owner's slice that exists, as the daemon
// starts: a bound an earlier configuration set
// and this one leaves out is lifted (systemd keeps a slice's limits for
// the boot), so that the configuration read is the one in force.
// Creates set them on the slices made later.
func (lim *Limits) ApplyUserLimits(ctx context.Context) error {
	found, err := lim.h.Units().List(ctx, units.OwnerSlices)
	if err != nil {
		return fmt.Errorf("applying the per-user limits: listing the users' slices: %w", err)
	}
	l := lim.cfg.UserLimits
	none := uint64(math.MaxUint64) // systemd's infinity
	if l.MemoryMax == nil {
		l.MemoryMax = &none
	}
	if l.TasksMax == nil {
		l.TasksMax = &none
	}
	var errs []error
	// All sandboxes together first: the users' slices live under it.
	all := lim.cfg.SliceLimits
	if all.MemoryMax == nil {
		all.MemoryMax = &none
	}
	if all.TasksMax == nil {
		all.TasksMax = &none
	}
	if err := lim.h.Units().SetSliceLimits(ctx, units.SliceRoot, all); err != nil {
		errs = append(errs, err)
	}
	for _, u := range found {
		if !units.IsOwnerSlice(u.Name) {
			continue // a bucket of scopes (units.ScopeSlice): its owner's bounds hold it
		}
		if err := lim.h.Units().SetSliceLimits(ctx, u.Name, l); err != nil {
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
func (lim *Limits) Usage(ctx context.Context, uid uint32) (Usage, error) {
	p := lim.h.Policy()
	u := Usage{
		MemoryMax: deref(lim.cfg.UserLimits.MemoryMax), TasksMax: deref(lim.cfg.UserLimits.TasksMax),
		SandboxesMax: p.MaxPerOwner,
		AllMemoryMax: deref(lim.cfg.SliceLimits.MemoryMax), AllTasksMax: deref(lim.cfg.SliceLimits.TasksMax),
		AllSandboxesMax: p.MaxSandboxes, PromisedMax: p.MaxMemory,
	}
	for _, e := range admission.Live(lim.h.Store().Entries()) {
		u.AllSandboxes++
		if e.Owner == uid {
			u.Sandboxes++
		}
		var l units.Limits
		if len(e.Limits) > 0 && json.Unmarshal(e.Limits, &l) == nil && l.MemoryMax != nil {
			u.Promised += *l.MemoryMax
		}
	}
	own, err := lim.usage.read(ctx, lim.h.Units(), units.OwnerSlice(uid))
	if err != nil {
		return u, fmt.Errorf("the usage of uid %d: %w", uid, err)
	}
	all, err := lim.usage.read(ctx, lim.h.Units(), units.SliceRoot)
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
	mu  sync.Mutex // held while systemd is asked: one reading at a time
	m   map[string]sliceUsageRead
	now func() time.Time // time.Now; a test's clock in tests
}

type sliceUsageRead struct {
	u  units.SliceUsage
	at time.Time
}

// read is slice name's usage, read from systemd (u) at most
// SliceUsageTTL ago.
func (c *sliceUsageCache) read(ctx context.Context, u supervisor.Units, name string) (units.SliceUsage, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
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
