package supervisor

import (
	"context"
	"github.com/sandboxd/sandboxd/internal/hook"
	"time"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/runtime/nsinit"
	"github.com/sandboxd/sandboxd/supervisor/state"
)

// Hook is one point of a sandbox's life where rooms add what they do.
type Hook[F any] = hook.Hook[F]

// Started says that a sandbox's init runs its world: made by a create, a
// restart (Reconcile, a rollback, a rebase) or found again after a
// daemon's restart (Adopted).
type Started struct {
	Record state.Record
	PID    int // the init's, in the host's pid namespace
	// Adopted: the init outlived a restart of the daemon, which found it.
	Adopted bool
}

// ReconcileView is what Reconcile read of the pool and of systemd before
// it reconciled the sandboxes, for the rooms' reconcile hooks.
type ReconcileView struct {
	Records []state.Record
	Volumes []cowfs.Volume
	// Active: the sandboxes' scopes by unit name, true if active.
	Active map[string]bool
}

// Hooks are the points of a sandbox's life that rooms join. Each is
// called with no lock of the core held unless it says so.
type Hooks struct {
	// BeforeLaunch runs before a sandbox's init is launched (its mount
	// namespace is a copy of the daemon's: what must show in it is
	// mounted here: the owner's cache).
	BeforeLaunch Hook[func(ctx context.Context, rec state.Record)]
	// Claim offers a create to the warm pools (supervisor/pool) before
	// one is made: want is the sandbox it would make (no id yet), ttl its
	// time to live. A room that hands out a ready sandbox like it returns
	// it, claimed (Host's Claim), and true.
	Claim Hook[func(ctx context.Context, want state.Record, ttl time.Duration) (Sandbox, bool, error)]
	// Spec lets a room add to the spec the init builds its world from;
	// release runs once the init built it (or failed to).
	Spec Hook[func(ctx context.Context, rec state.Record, spec *nsinit.Spec) (release func())]
	// Idmapped runs once the mounts of an init in a user namespace are
	// idmapped, before it builds its world from them: what a room asked
	// for in the spec and could not be had (the cache: m.CacheErr).
	Idmapped Hook[func(rec state.Record, m *nsinit.Mounts)]
	// Started runs once a sandbox's init runs its world.
	Started Hook[func(ctx context.Context, st Started)]
	// Stopped runs when the daemon forgets a sandbox's init: it was
	// stopped (a destroy, a rollback, a restart) or the daemon closes.
	Stopped Hook[func(id string)]
	// Destroying runs as a sandbox is destroyed, its scope stopped,
	// before its volumes go, with its lock held.
	Destroying Hook[func(ctx context.Context, rec state.Record)]
	// Destroyed runs after a sandbox's record is gone, with no lock held
	// (the admission lock neither: an eviction runs them after it).
	Destroyed Hook[func(ctx context.Context, rec state.Record)]
	// CommandEnv adds to the environment of each command run in a
	// sandbox (before the project's and the caller's own).
	CommandEnv Hook[func(rec state.Record) []string]
	// Busy reports whether a room is doing something in sandbox id now
	// (an idle sandbox is frozen; a busy one is not).
	Busy Hook[func(ctx context.Context, id string) bool]
	// BeforeReconcile runs as the daemon starts, before the sandboxes are
	// reconciled (their scopes started again): what a crash left half
	// done that a sandbox's start would see.
	BeforeReconcile Hook[func(ctx context.Context, v ReconcileView) error]
	// AfterReconcile runs once the sandboxes are reconciled, before
	// orphan volumes are removed; it adds what it did to the report.
	AfterReconcile Hook[func(ctx context.Context, rep *Report) error]
	// LoadProjects runs as the project registry (Projects().Load) reads
	// the recorded projects, under the admission lock: it finishes what
	// a crash left of them (an adoption) and returns those to load.
	LoadProjects Hook[func(ctx context.Context, recs []state.Project) []state.Project]
	// Close runs as the daemon ends, before the sandboxes' inits are
	// forgotten, last added first (as defers run): a room made over
	// others ends before them.
	Close Hook[func()]
	// Refusals are a room's sentinels that are the caller's fault (no
	// such command, port, checkpoint): the audit log keeps them short
	// and budgets them apart from the caller's actions.
	Refusals Hook[error]
}

// Hooks are the points of the sandboxes' lives that rooms join.
func (s *Supervisor) Hooks() *Hooks { return &s.hooks }

// started runs the Started hooks.
func (h *Hooks) started(ctx context.Context, st Started) {
	for _, f := range h.Started.Funcs() {
		f(ctx, st)
	}
}

// destroyed returns what runs the Destroyed hooks for rec.
func (h *Hooks) destroyed(ctx context.Context, rec state.Record) func() {
	return func() {
		for _, f := range h.Destroyed.Funcs() {
			f(ctx, rec)
		}
	}
}
