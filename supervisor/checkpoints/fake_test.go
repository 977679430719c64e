package checkpoints_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/supervisor"
	"github.com/sandboxd/sandboxd/supervisor/checkpoints"
	"github.com/sandboxd/sandboxd/supervisor/hosttest"
	"github.com/sandboxd/sandboxd/supervisor/state"
)

// fakePool is the part of a pool the room's unit tests reach: volumes by
// name, no files. A call the room should not make panics (the nil
// Backend it embeds).
type fakePool struct {
	cowfs.Backend
	mu      sync.Mutex
	vols    map[string]cowfs.Volume
	changes []cowfs.Change // what Changes answers
	swaps   []string       // Rollback's calls, "volume<-snapshot"
	fail    map[string]error
}

func newFakePool() *fakePool {
	return &fakePool{vols: map[string]cowfs.Volume{}, fail: map[string]error{}}
}

// failOn makes method's calls on volume name fail.
func (p *fakePool) failOn(method, name string, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fail[method+" "+name] = err
}

func (p *fakePool) add(name string, kind cowfs.Kind) cowfs.Volume {
	v := cowfs.Volume{Name: name, ID: name, Path: "/pool/" + name, Kind: kind, Ours: true}
	p.vols[name] = v
	return v
}

func (p *fakePool) names() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for n := range p.vols {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

func (p *fakePool) Info() cowfs.Info { return cowfs.Info{Backend: "fake"} }

func (p *fakePool) Get(_ context.Context, name string) (cowfs.Volume, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	v, ok := p.vols[name]
	if !ok {
		return v, fmt.Errorf("volume %s: %w", name, cowfs.ErrNotFound)
	}
	return v, nil
}

func (p *fakePool) Create(_ context.Context, name string) (cowfs.Volume, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.fail["Create "+name]; err != nil {
		return cowfs.Volume{}, err
	}
	return p.add(name, cowfs.KindWritable), nil
}

func (p *fakePool) Snapshot(_ context.Context, src cowfs.Volume, name string, readOnly bool) (cowfs.Volume, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.fail["Snapshot "+name]; err != nil {
		return cowfs.Volume{}, err
	}
	if _, ok := p.vols[name]; ok {
		return cowfs.Volume{}, fmt.Errorf("volume %s: %w", name, cowfs.ErrExists)
	}
	kind := cowfs.KindWritable
	if readOnly {
		kind = cowfs.KindReadOnly
	}
	v := p.add(name, kind)
	v.Origin = src.ID
	p.vols[name] = v
	return v, nil
}

func (p *fakePool) Delete(_ context.Context, v cowfs.Volume) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.vols[v.Name]; !ok {
		return fmt.Errorf("volume %s: %w", v.Name, cowfs.ErrNotFound)
	}
	delete(p.vols, v.Name)
	return nil
}

func (p *fakePool) Rollback(_ context.Context, v, to cowfs.Volume) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.fail["Rollback "+v.Name]; err != nil {
		return err
	}
	p.swaps = append(p.swaps, v.Name+"<-"+to.Name)
	return nil
}

func (p *fakePool) Changes(context.Context, cowfs.Volume, cowfs.Volume) ([]cowfs.Change, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.changes), nil
}

// fakeUnits records which scopes were frozen and thawed.
type fakeUnits struct {
	supervisor.Units
	mu     sync.Mutex
	frozen map[string]int // unit -> freezes less thaws
	calls  []string
}

func (u *fakeUnits) Freeze(_ context.Context, name string) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.frozen[name]++
	u.calls = append(u.calls, "freeze "+name)
	return nil
}

func (u *fakeUnits) Thaw(_ context.Context, name string) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.frozen[name]--
	u.calls = append(u.calls, "thaw "+name)
	return nil
}

// fakeHost is hosttest's Host with the extras of checkpoints.Host: it
// records the stops and starts a rollback or a rebase asks for.
type fakeHost struct {
	*hosttest.Host
	mu      sync.Mutex
	stops   []string
	starts  []state.Record
	stopErr error // StopSandbox's answer once the scope is stopped
}

var _ checkpoints.Host = (*fakeHost)(nil)

func (h *fakeHost) StopSandbox(_ context.Context, rec state.Record, stopped func()) (func(context.Context, state.Record) error, error) {
	h.mu.Lock()
	h.stops = append(h.stops, rec.ID)
	h.mu.Unlock()
	stopped()
	h.Stop(rec.ID)
	start := func(ctx context.Context, rec state.Record) error {
		h.mu.Lock()
		h.starts = append(h.starts, rec)
		h.mu.Unlock()
		return h.Start(ctx, rec.ID, 1000+len(h.starts), false)
	}
	return start, h.stopErr
}

func (h *fakeHost) BoundDisk(context.Context, state.Record, ...cowfs.Volume) error { return nil }

func (h *fakeHost) OpenProject(context.Context, state.Record) (func(context.Context, string) (cowfs.Volume, error), error) {
	return nil, fmt.Errorf("no projects in this fake: %w", supervisor.ErrUnknownProject)
}

// unitEnv is the room over a fake Host, pool and units, with one ready
// sandbox whose system layer is a volume.
type unitEnv struct {
	h     *fakeHost
	pool  *fakePool
	units *fakeUnits
	ck    *checkpoints.Checkpoints
	rec   state.Record
}

func newUnitEnv(t *testing.T, cfg checkpoints.Config) *unitEnv {
	t.Helper()
	pool, u := newFakePool(), &fakeUnits{frozen: map[string]int{}}
	h := &fakeHost{Host: hosttest.New(t, pool, u)}
	id := "0123456789ab"
	rec := h.AddSandbox(t, state.Record{ID: id, Project: "web", Base: "base-" + id, Volume: "sb-" + id,
		Layer: "sys-" + id, Unit: "sandbox-" + id + ".scope"})
	for _, n := range []string{rec.Base, rec.Volume, rec.Layer} {
		pool.add(n, cowfs.KindWritable)
	}
	return &unitEnv{h: h, pool: pool, units: u, ck: checkpoints.New(h, cfg), rec: rec}
}
