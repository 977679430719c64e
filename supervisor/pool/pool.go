// Package pool is the supervisor's room of warm pools: per project and
// owner, sandboxes made ahead of time, so that a create like the owner's
// last one claims a ready sandbox instead of making one (issue 34; the
// design, and why the claim is sound, in docs/design-warmpool.md).
//
// A pool starts with an owner's first create of a project (a full one)
// and makes its sandboxes with that create's options; a create with
// other options is a full create, and two in a row teach the pool those
// (its sandboxes are remade). A pool's sandbox is the owner's: his id block,
// slice and cache; it counts against his bounds and the host's, and gives
// way to his creates (admission.Policy.Admit). The project is marked
// before each pool sandbox's snapshot (Changes); a claim hands out only a
// sandbox whose project is unchanged since its mark, else a full create
// sees the project as it is. Sandboxes a previous daemon pooled are
// destroyed at start (their marks are gone) and made again.
package pool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/internal/steps"
	"github.com/sandboxd/sandboxd/sandboxd1"
	"github.com/sandboxd/sandboxd/supervisor"
	"github.com/sandboxd/sandboxd/supervisor/state"
)

// Host is the core as this room needs it (supervisor/host_pool.go).
type Host interface {
	supervisor.Host
	// CreatePooled makes a pool's sandbox like rec.
	CreatePooled(ctx context.Context, like state.Record) (supervisor.Sandbox, error)
	// Claim makes pool sandbox id the create of want.
	Claim(ctx context.Context, id string, want state.Record, ttl time.Duration) (supervisor.Sandbox, error)
	// Creating is how many creates are under way, but for the pools'.
	Creating() int
}

// Changes tells whether a project changed since a mark: fanotify in the
// daemon (Watch), a fake in the unit tests.
type Changes interface {
	// Mark marks the project whose volume is at dir, before a pool
	// sandbox's snapshot of it; an error (a writer holds a file of it
	// open: a write through a mapping makes no event) is "do not pool
	// now".
	Mark(dir string) (Mark, error)
	// Unchanged says whether nothing was written to the project since m.
	Unchanged(m Mark) bool
}

// Mark is where a project stood at Changes.Mark.
type Mark interface{}

// Config is what the room is made with.
type Config struct {
	// Size is the pool's size for a project (0: none).
	Size func(project string) int
	// Changes: nil leaves every pool off (a filesystem it cannot watch).
	Changes Changes
}

// Pools is the room.
type Pools struct {
	h     Host
	cfg   Config
	kick  chan struct{}
	stop  context.CancelFunc
	ended chan struct{}

	mu    sync.Mutex
	last  time.Time // when the last caller's create began (quiet)
	pools map[key]*pool
	// retired: pool sandboxes to destroy (stale, of a pool gone or
	// changed, or pooled by a previous daemon).
	retired []string
}

type key struct {
	project string
	owner   uint32
}

type pool struct {
	like  state.Record // the options of the owner's last create
	print string       // what a create must ask for to claim (fingerprint)
	// pending: other options the owner's last create asked for, which
	// the pool takes if his next asks for them again.
	pending string
	actor   supervisor.Actor
	ready   []member
	// making: a sandbox being made; blocked: why the last refill failed
	// (nil: none), cleared by a claim or a destroy.
	making                bool
	blocked               error
	claims, misses, stale uint64
}

type member struct {
	id   string
	mark Mark
}

// Status is a pool as ListPools shows it.
type Status = sandboxd1.Pool

// New makes the room over h and joins its hooks; its refills run in the
// background until the core closes.
func New(h Host, cfg Config) *Pools {
	ctx, stop := context.WithCancel(supervisor.WithActor(context.Background(), supervisor.Daemon("pool")))
	p := &Pools{h: h, cfg: cfg, kick: make(chan struct{}, 1), stop: stop, ended: make(chan struct{}), pools: map[key]*pool{}}
	hooks := h.Hooks()
	hooks.Claim.Add(p.claim)
	hooks.Destroyed.Add(func(_ context.Context, rec state.Record) { p.gone(rec.ID) })
	hooks.AfterReconcile.Add(p.afterReconcile)
	hooks.Close.Add(p.close)
	go p.refill(ctx)
	return p
}

// List is the pools of owner (all: every owner's).
func (p *Pools) List(owner uint32, all bool) []Status {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := []Status{}
	for k, pl := range p.pools {
		if !all && k.owner != owner {
			continue
		}
		st := Status{Project: k.project, Owner: k.owner, Size: p.size(k.project), Ready: len(pl.ready),
			Claims: pl.claims, Misses: pl.misses, Stale: pl.stale}
		if pl.making {
			st.Making = 1
		}
		if pl.blocked != nil {
			st.Blocked = pl.blocked.Error()
		}
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b Status) int {
		if a.Project != b.Project {
			return compare(a.Project, b.Project)
		}
		return int(int64(a.Owner) - int64(b.Owner))
	})
	return out
}

func compare(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func (p *Pools) size(project string) int {
	if p.cfg.Changes == nil || p.cfg.Size == nil {
		return 0
	}
	return p.cfg.Size(project)
}

// claim is the core's Claim hook: a ready sandbox like want, whose
// project is unchanged since its mark, made want's.
func (p *Pools) claim(ctx context.Context, want state.Record, ttl time.Duration) (supervisor.Sandbox, bool, error) {
	k := key{want.Project, want.Owner}
	size := p.size(want.Project)
	p.mu.Lock()
	p.last = time.Now()
	pl := p.pools[k]
	if size == 0 {
		if pl != nil { // sized 0 since (a project's pool is read at start)
			p.retireLocked(k, pl)
		}
		p.mu.Unlock()
		return supervisor.Sandbox{}, false, nil
	}
	print := fingerprint(want)
	if pl == nil || pl.print != print {
		// The owner's first create, or the second in a row with other
		// options (one alone leaves the pool as it is: a caller
		// alternating options must not make it remake every sandbox
		// each time): a full one, and the pool makes sandboxes like it
		// from now on.
		if pl == nil {
			pl = &pool{}
			p.pools[k] = pl
		} else {
			pl.misses++
			if pl.pending != print {
				pl.pending = print
				p.mu.Unlock()
				return supervisor.Sandbox{}, false, nil
			}
			p.retireMembersLocked(pl)
		}
		pl.like, pl.print, pl.pending, pl.blocked = want, print, "", nil
		pl.like.Name = ""
		pl.actor = actorOf(ctx, pl.actor)
		p.mu.Unlock()
		p.wake()
		return supervisor.Sandbox{}, false, nil
	}
	pl.actor = actorOf(ctx, pl.actor) // the owner as he is now (his groups)
	timing := steps.Of(ctx)
	for {
		if len(pl.ready) == 0 {
			pl.misses++
			pl.blocked = nil
			p.mu.Unlock()
			p.wake()
			return supervisor.Sandbox{}, false, nil
		}
		m := pl.ready[0]
		pl.ready = pl.ready[1:]
		p.mu.Unlock()
		unchanged := p.cfg.Changes.Unchanged(m.mark)
		timing.Mark("unchanged")
		if !unchanged {
			p.mu.Lock()
			pl.stale++
			p.retired = append(p.retired, m.id)
			continue
		}
		sb, err := p.h.Claim(ctx, m.id, want, ttl)
		p.mu.Lock()
		switch {
		case errors.Is(err, supervisor.ErrExists): // the caller's name is taken
			pl.ready = append([]member{m}, pl.ready...)
			p.mu.Unlock()
			return sb, true, err
		case err != nil:
			p.h.Log().Warn("a pool's sandbox could not be claimed; making a sandbox instead", "SANDBOX_ID", m.id, "error", err)
			p.retired = append(p.retired, m.id)
			continue
		}
		pl.claims++
		pl.blocked = nil
		p.mu.Unlock()
		p.wake()
		timing.Mark("claimed")
		p.h.Log().Info("sandbox claimed from a pool", "SANDBOX_ID", sb.ID, "CALLER_UID", want.Owner, "ACTION", "create",
			"project", want.Project, "took_ms", float64(timing.Took().Microseconds())/1000, "steps", timing.String())
		return sb, true, nil
	}
}

// actorOf is the caller of ctx, whose right to the project the pool's
// refills check (old if ctx names none).
func actorOf(ctx context.Context, old supervisor.Actor) supervisor.Actor {
	if a, err := supervisor.ActorOf(ctx); err == nil {
		return a
	}
	return old
}

// fingerprint is what of a create's sandbox a pool's must equal to be
// claimed by it: everything but its name and ids.
func fingerprint(r state.Record) string {
	b, _ := json.Marshal(struct {
		Project, Location, Profile, Network string
		Owner                               uint32
		Limits                              json.RawMessage
		DiskQuota                           uint64
		Allow, Hidden, ReadOnly, Env        []string
		ReadOnlyProject, NoCache, Boot      bool
	}{r.Project, r.ProjectLocation, r.Profile, r.Network, r.Owner, r.Limits, r.DiskQuota,
		r.Allow, r.Hidden, r.ReadOnly, r.Env, r.ReadOnlyProject, r.NoCache, r.Boot})
	return string(b)
}

// gone forgets a sandbox destroyed by someone else (an eviction, an
// admin): its pool makes another.
func (p *Pools) gone(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, pl := range p.pools {
		if i := slices.IndexFunc(pl.ready, func(m member) bool { return m.id == id }); i >= 0 {
			pl.ready = slices.Delete(pl.ready, i, i+1)
			pl.blocked = nil
			defer p.wake()
		}
	}
}

func (p *Pools) retireMembersLocked(pl *pool) {
	for _, m := range pl.ready {
		p.retired = append(p.retired, m.id)
	}
	pl.ready = nil
}

func (p *Pools) retireLocked(k key, pl *pool) {
	p.retireMembersLocked(pl)
	delete(p.pools, k)
	p.wake()
}

// afterReconcile takes up the sandboxes a previous daemon pooled: their
// marks are gone, so they are destroyed, and their pools made again.
func (p *Pools) afterReconcile(ctx context.Context, _ *supervisor.Report) error {
	recs, err := p.h.Store().List()
	if err != nil {
		return fmt.Errorf("listing the pools' sandboxes: %w", err)
	}
	p.mu.Lock()
	for _, r := range recs {
		if !r.Pool {
			continue
		}
		p.retired = append(p.retired, r.ID)
		k := key{r.Project, r.Owner}
		if p.pools[k] == nil && p.size(r.Project) > 0 {
			like := r
			like.ID, like.Name = "", ""
			p.pools[k] = &pool{like: like, print: fingerprint(like), actor: supervisor.Caller(supervisor.Identity{UID: r.Owner})}
		}
	}
	p.mu.Unlock()
	p.wake()
	return nil
}

func (p *Pools) wake() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// close ends the refills, then the watch of the projects' changes.
func (p *Pools) close() {
	p.stop()
	<-p.ended
	if c, ok := p.cfg.Changes.(io.Closer); ok {
		_ = c.Close()
	}
}
