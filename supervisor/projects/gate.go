package projects

// The per-project gate: one promotion of a project at a time, and what a
// sandbox create takes as its base while a promotion's stage is under way.

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/sandboxd/sandboxd/cowfs"
)

// Gate keeps sandbox creates (and rebases) from taking as their
// base a project state that a promotion may still take back. From the
// moment a stage is about to write the project until it passed or was
// undone, the project is "staged": a create's base is then a snapshot of
// the stage's rollback point, the project as it was before the apply,
// which was real and stays valid whatever the checks decide. The gate's
// lock is held exclusively only to switch a project in and out of that
// state (waiting for the project snapshots under way), never while the
// change is written or checked: a create never waits on a check (issue
// 28, finding 8).
type Gate struct {
	mu     sync.Mutex
	gates  map[string]*sync.RWMutex
	busy   map[string]string         // project -> the promotion under way
	staged map[string]*stagedProject // project -> its stage under way
}

// stagedProject is a project's stage under way: its rollback point, and
// a channel closed once it passed or was undone.
type stagedProject struct {
	rollbackPoint cowfs.Volume
	settled       chan struct{}
}

// Gate is the registry's project gate.
func (r *Registry) Gate() *Gate { return &r.gate }

func (g *Gate) of(project string) *sync.RWMutex {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.gates == nil {
		g.gates = map[string]*sync.RWMutex{}
	}
	m, ok := g.gates[project]
	if !ok {
		m = &sync.RWMutex{}
		g.gates[project] = m
	}
	return m
}

// Claim marks project as being promoted by pid, or says who is.
func (g *Gate) Claim(project, pid string) (string, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.busy == nil {
		g.busy = map[string]string{}
	}
	if other, ok := g.busy[project]; ok {
		return other, false
	}
	g.busy[project] = pid
	return "", true
}

// Release ends Claim's claim.
func (g *Gate) Release(project string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.busy, project)
}

// Stage marks project staged with rollback point rp, once the snapshots
// of it under way are taken, and returns what settles it (see settle),
// which may be called more than once.
func (g *Gate) Stage(project string, rp cowfs.Volume) (settle func()) {
	gate := g.of(project)
	gate.Lock()
	st := &stagedProject{rollbackPoint: rp, settled: make(chan struct{})}
	g.mu.Lock()
	if g.staged == nil {
		g.staged = map[string]*stagedProject{}
	}
	g.staged[project] = st
	g.mu.Unlock()
	gate.Unlock()
	var once sync.Once
	return func() { once.Do(func() { g.settle(project, st) }) }
}

// settle ends st: once the snapshots of its rollback point under way are
// taken, creates take the project itself again, and those that waited
// for it (a backend that cannot snapshot the rollback point) go on.
func (g *Gate) settle(project string, st *stagedProject) {
	gate := g.of(project)
	gate.Lock()
	g.mu.Lock()
	if g.staged[project] == st {
		delete(g.staged, project)
	}
	g.mu.Unlock()
	close(st.settled)
	gate.Unlock()
}

func (g *Gate) stagedOf(project string) *stagedProject {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.staged[project]
}

// SnapshotBase takes a read-only snapshot named name of the project
// called projectName (opened as project) for a sandbox's base: of the
// project itself, its writers frozen for the moment, or, while a stage of
// a promotion of it is under way, of that stage's rollback point (see
// Gate). A backend that cannot snapshot a read-only snapshot
// read-only (none of sandboxd's: ZFS shares the snapshot) waits for the
// stage's end instead, or for ctx's.
func (r *Registry) SnapshotBase(ctx context.Context, projectName string, project cowfs.Volume, name string) (cowfs.Volume, error) {
	gate := r.gate.of(projectName)
	for {
		gate.RLock()
		st := r.gate.stagedOf(projectName)
		if st == nil {
			thaw := r.FreezeWriters(ctx, projectName)
			v, err := r.cfg.Backend.Snapshot(ctx, project, name, true)
			thaw()
			gate.RUnlock()
			return v, err
		}
		v, err := r.cfg.Backend.Snapshot(ctx, st.rollbackPoint, name, true)
		gate.RUnlock()
		if err == nil || !errors.Is(err, cowfs.ErrUnsupported) {
			return v, err
		}
		select {
		case <-st.settled:
		case <-ctx.Done():
			return v, fmt.Errorf("waiting for the promotion's stage of project %s to end (this pool cannot snapshot its rollback point): %w", projectName, context.Cause(ctx))
		}
	}
}
