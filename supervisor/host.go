package supervisor

import (
	"context"
	"log/slog"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/supervisor/audit"
	"github.com/sandboxd/sandboxd/supervisor/state"
)

// Host is the core as a room sees it (tailscale's ipnext.Host): the
// sandboxes' records, locks and parts, the projects, the seams below, and
// the hooks a room joins. Rooms (ports, caches, commands, checkpoints,
// promotion, adoption, try) are made over a Host and keep their own
// state; the core imports none of them. Tests of a room use a fake Host
// (supervisor/hosttest).
type Host interface {
	// Hooks are the points of a sandbox's life a room joins.
	Hooks() *Hooks
	// The seams below: the pool, systemd, the store.
	Backend() cowfs.Backend
	Units() Units
	Store() *state.Store
	Log() *slog.Logger

	// Lock takes sandbox id's lock: one operation at a time per sandbox.
	Lock(id string) (unlock func())
	// Sandbox is sandbox id as it is now (its state current, its path).
	Sandbox(ctx context.Context, id string) (Sandbox, error)
	// InitPID is the pid of sandbox id's init, if it runs.
	InitPID(id string) (int, bool)
	// RuntimeDir is sandbox id's runtime directory (its init's socket).
	RuntimeDir(id string) string
	// Wake thaws or starts sandbox id if it was frozen or stopped for
	// being idle (ErrStopped if a caller stopped it), and records
	// activity; Touch records activity only.
	Wake(ctx context.Context, id string) error
	Touch(id string)

	// Project is the project called name, and whether there is one.
	Project(name string) (Project, bool)
	// MayUseProject says whether a may use project name (nil: yes).
	MayUseProject(ctx context.Context, a Actor, name string) error

	// Create and Destroy make and end sandboxes as any caller does (a
	// promotion's checks, try), with the actor of ctx.
	Create(ctx context.Context, opts CreateOptions) (Sandbox, error)
	Destroy(ctx context.Context, id string) error

	// SandboxChanges lists what a sandbox changed since base (now: a
	// read-only snapshot of it); FilterChanges leaves out what project's
	// ignore rules (read from base) say never leaves a sandbox, and
	// counts it. WithChanges runs fn on sandbox id's changes now, under
	// its lock, from a read-only snapshot deleted after; what names the
	// work in errors.
	SandboxChanges(ctx context.Context, base, now cowfs.Volume) ([]cowfs.Change, error)
	FilterChanges(ctx context.Context, project string, base, now cowfs.Volume, changes []cowfs.Change) ([]cowfs.Change, int, error)
	WithChanges(ctx context.Context, id, what string, fn func(base, now cowfs.Volume, changes []cowfs.Change, ignored int) error) error
	// FrozenSnapshot is a read-only snapshot named name of vol, a volume
	// of sandbox rec, taken with the sandbox frozen if it runs, so that
	// what it holds is consistent.
	FrozenSnapshot(ctx context.Context, rec state.Record, vol cowfs.Volume, name string) (cowfs.Volume, error)

	// Audit records an action on rec and how it ended, with the caller
	// of ctx; AuditEntry records e so.
	Audit(ctx context.Context, action string, rec state.Record, err error)
	AuditEntry(ctx context.Context, e audit.Entry, rec state.Record, err error)
}

// host is the Supervisor as its rooms see it.
type host struct{ s *Supervisor }

// Host is s as its rooms see it.
func (s *Supervisor) Host() Host { return host{s} }

func (h host) Hooks() *Hooks               { return &h.s.hooks }
func (h host) Backend() cowfs.Backend      { return h.s.cfg.Backend }
func (h host) Units() Units                { return h.s.cfg.Units }
func (h host) Store() *state.Store         { return h.s.cfg.Store }
func (h host) Log() *slog.Logger           { return h.s.log }
func (h host) Lock(id string) func()       { return h.s.locks.Lock(id) }
func (h host) RuntimeDir(id string) string { return h.s.worlds.dir(id) }
func (h host) Touch(id string)             { h.s.activity.Touch(id) }

func (h host) Sandbox(ctx context.Context, id string) (Sandbox, error) { return h.s.Get(ctx, id) }

func (h host) InitPID(id string) (int, bool) {
	if w := h.s.worlds.get(id); w != nil {
		return w.pid, true
	}
	return 0, false
}

func (h host) Wake(ctx context.Context, id string) error { return h.s.wake(ctx, id) }

func (h host) Project(name string) (Project, bool) { return h.s.projects.Get(name) }

func (h host) MayUseProject(ctx context.Context, a Actor, name string) error {
	return h.s.MayUseProject(ctx, a, name)
}

func (h host) Audit(ctx context.Context, action string, rec state.Record, err error) {
	h.s.auditor.record(ctx, action, rec, err)
}

func (h host) AuditEntry(ctx context.Context, e audit.Entry, rec state.Record, err error) {
	h.s.auditor.entry(ctx, e, rec, err)
}

func (h host) Create(ctx context.Context, opts CreateOptions) (Sandbox, error) {
	return h.s.Create(ctx, opts)
}

func (h host) Destroy(ctx context.Context, id string) error { return h.s.Destroy(ctx, id) }
