package pool

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sandboxd/sandboxd/supervisor"
	"github.com/sandboxd/sandboxd/supervisor/state"
)

// retry is how often a pool that could not be refilled (a bound reached,
// a writer on the project) tries again when nothing else wakes it.
const retry = 30 * time.Second

// yield is how often a refill looks whether a caller's create is under
// way; quiet, how long none must have been before it makes a sandbox: the
// pools work at low priority, and a member made between two claims of a
// burst delayed the second (a create's commit and snapshots beside it).
const (
	yield = 2 * time.Millisecond
	quiet = 20 * time.Millisecond
)

// refill makes and destroys the pools' sandboxes, one at a time, while no
// caller's create is under way, until ctx ends.
func (p *Pools) refill(ctx context.Context) {
	defer close(p.ended)
	tick := time.NewTicker(retry)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.kick:
		case <-tick.C:
			p.sweep()
			p.unblock()
		}
		for ctx.Err() == nil && p.step(ctx) {
		}
	}
}

// step does one piece of the pools' work: it destroys a retired sandbox,
// or makes one for a pool short of its size; false when there is none.
func (p *Pools) step(ctx context.Context) bool {
	// No caller's create for quiet, counted from when the last ended.
	var since time.Time
	for since.IsZero() || time.Since(since) < quiet {
		if p.h.Creating() > 0 || time.Since(p.lastCreate()) < yield {
			since = time.Time{}
		} else if since.IsZero() {
			since = time.Now()
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(yield):
		}
	}
	p.mu.Lock()
	if n := len(p.retired); n > 0 {
		id := p.retired[n-1]
		p.retired = p.retired[:n-1]
		p.mu.Unlock()
		if err := p.h.Destroy(ctx, id); err != nil && !errors.Is(err, supervisor.ErrNotFound) && ctx.Err() == nil {
			p.h.Log().Warn("destroying a pool's sandbox", "SANDBOX_ID", id, "error", err)
		}
		return true
	}
	var k key
	var pl *pool
	for kk, x := range p.pools {
		if !x.making && x.blocked == nil && len(x.ready) < p.size(kk.project) {
			k, pl = kk, x
			break
		}
	}
	if pl == nil {
		p.mu.Unlock()
		return false
	}
	pl.making = true
	like, actor := pl.like, pl.actor
	p.mu.Unlock()

	m, sb, err := p.make(ctx, like, actor)
	p.mu.Lock()
	defer p.mu.Unlock()
	pl.making = false
	if p.pools[k] != pl || pl.like.ProjectLocation != like.ProjectLocation || fingerprint(pl.like) != fingerprint(like) {
		if err == nil { // the pool went or changed meanwhile
			p.retired = append(p.retired, sb.ID)
		}
		return true
	}
	if err != nil {
		pl.blocked = err
		if ctx.Err() == nil {
			p.h.Log().Info("a pool is not refilled for now", "project", k.project, "owner", k.owner, "error", err)
		}
		return true
	}
	pl.ready = append(pl.ready, member{id: sb.ID, mark: m})
	return true
}

// make marks the project and makes a sandbox like like, for actor (the
// owner who started the pool must still be allowed the project).
func (p *Pools) make(ctx context.Context, like state.Record, actor supervisor.Actor) (Mark, supervisor.Sandbox, error) {
	if err := p.h.MayUseProject(ctx, actor, like.Project); err != nil {
		return nil, supervisor.Sandbox{}, err
	}
	location, ok := p.h.Project(like.Project)
	if !ok || location.Location != like.ProjectLocation {
		return nil, supervisor.Sandbox{}, fmt.Errorf("project %s is gone or moved: %w", like.Project, supervisor.ErrUnknownProject)
	}
	vol, err := p.h.Backend().Project(ctx, location.Location)
	if err != nil {
		return nil, supervisor.Sandbox{}, err
	}
	// Before the snapshot: a write between the two is a false alarm at
	// the claim, never a miss.
	m, err := p.cfg.Changes.Mark(vol.Path)
	if err != nil {
		return nil, supervisor.Sandbox{}, err
	}
	sb, err := p.h.CreatePooled(ctx, like)
	return m, sb, err
}

// sweep retires the pools whose project is gone or moved (a removal does
// not wait for the pools' sandboxes, which no caller can destroy).
func (p *Pools) sweep() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, pl := range p.pools {
		if at, ok := p.h.Project(k.project); !ok || at.Location != pl.like.ProjectLocation {
			p.retireLocked(k, pl)
		}
	}
}

// unblock lets the pools whose refill failed try again.
func (p *Pools) unblock() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, pl := range p.pools {
		pl.blocked = nil
	}
}

func (p *Pools) lastCreate() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.last
}
