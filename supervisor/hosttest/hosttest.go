// Package hosttest is a fake supervisor.Host for the rooms' unit tests:
// no root, no systemd, no pool of its own. The seams below are what the
// test gives (cowfs/cowfsfake and units/unitsfake, or its own); the
// records are a real state.Store in a temporary directory; the test sets
// which inits run, which projects exist and who may use them, and reads
// what was audited. The lifecycle hooks rooms add are called by the test
// (Start, Stop, Destroy, Busy), as the core would.
package hosttest

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/supervisor"
	"github.com/sandboxd/sandboxd/supervisor/audit"
	"github.com/sandboxd/sandboxd/supervisor/state"
)

// Host is a fake supervisor.Host.
type Host struct {
	B   cowfs.Backend
	U   supervisor.Units
	S   *state.Store
	L   *slog.Logger
	Dir string // runtime directories live under it

	hooks supervisor.Hooks
	locks sync.Map // id -> *sync.Mutex

	mu       sync.Mutex
	pids     map[string]int
	projects map[string]supervisor.Project
	// May decides MayUseProject (nil: the actor's privilege, else
	// access denied).
	May     func(a supervisor.Actor, project string) error
	touched map[string]int
	audited []Audited
	// CreateFn makes a sandbox for Create (nil: a record alone, ready,
	// with a new id and opts' project, name and owner).
	CreateFn func(ctx context.Context, opts supervisor.CreateOptions) (supervisor.Sandbox, error)
	// Ignore leaves a change out in FilterChanges (nil: none).
	Ignore func(c cowfs.Change) bool
	ids    int
}

// Audited is one action the room audited.
type Audited struct {
	Entry  audit.Entry
	Record state.Record
	Err    error
}

var _ supervisor.Host = (*Host)(nil)

// New is a Host over backend and units (either may be nil for a room
// that uses neither), with an empty store.
func New(t testing.TB, backend cowfs.Backend, units supervisor.Units) *Host {
	t.Helper()
	dir := t.TempDir()
	st, err := state.Open(filepath.Join(dir, "state.db"), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return &Host{B: backend, U: units, S: st, L: slog.New(slog.DiscardHandler), Dir: filepath.Join(dir, "run"),
		pids: map[string]int{}, projects: map[string]supervisor.Project{}, touched: map[string]int{}}
}

// AddSandbox records rec (state Ready unless set) as the core would
// after a create.
func (h *Host) AddSandbox(t testing.TB, rec state.Record) state.Record {
	t.Helper()
	if rec.State == "" {
		rec.State = state.Ready
	}
	if rec.Created.IsZero() {
		rec.Created = time.Now().UTC()
	}
	if err := h.S.Create(rec); err != nil {
		t.Fatal(err)
	}
	return rec
}

// AddProject makes project p known.
func (h *Host) AddProject(p supervisor.Project) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.projects[p.Name] = p
}

// Start says that sandbox id's init runs as pid, calling the Started
// hooks as the core does.
func (h *Host) Start(ctx context.Context, id string, pid int, adopted bool) error {
	rec, err := h.S.Get(id)
	if err != nil {
		return err
	}
	h.mu.Lock()
	h.pids[id] = pid
	h.mu.Unlock()
	for _, f := range h.hooks.Started.Funcs() {
		f(ctx, supervisor.Started{Record: rec, PID: pid, Adopted: adopted})
	}
	return nil
}

// Stop says that sandbox id's init is gone, calling the Stopped hooks.
func (h *Host) Stop(id string) {
	h.mu.Lock()
	delete(h.pids, id)
	h.mu.Unlock()
	for _, f := range h.hooks.Stopped.Funcs() {
		f(id)
	}
}

// Destroy destroys sandbox id as the core does, as far as rooms see it:
// Stopped, Destroying, the record deleted, Destroyed.
func (h *Host) Destroy(ctx context.Context, id string) error {
	rec, err := h.S.Get(id)
	if err != nil {
		return err
	}
	h.Stop(id)
	for _, f := range h.hooks.Destroying.Funcs() {
		f(ctx, rec)
	}
	if err := h.S.Delete(id); err != nil {
		return err
	}
	for _, f := range h.hooks.Destroyed.Funcs() {
		f(ctx, rec)
	}
	return nil
}

// Busy is what the Busy hooks say of sandbox id.
func (h *Host) Busy(ctx context.Context, id string) bool {
	for _, f := range h.hooks.Busy.Funcs() {
		if f(ctx, id) {
			return true
		}
	}
	return false
}

// Close calls the Close hooks.
func (h *Host) Close() {
	for _, f := range h.hooks.Close.Funcs() {
		f()
	}
}

// Audits is what was audited so far.
func (h *Host) Audits() []Audited {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Audited(nil), h.audited...)
}

// Touches is how many times sandbox id was touched or woken.
func (h *Host) Touches(id string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.touched[id]
}

func (h *Host) Hooks() *supervisor.Hooks                { return &h.hooks }
func (h *Host) Backend() cowfs.Backend                  { return h.B }
func (h *Host) Units() supervisor.Units                 { return h.U }
func (h *Host) Store() *state.Store                     { return h.S }
func (h *Host) Log() *slog.Logger                       { return h.L }
func (h *Host) RuntimeDir(id string) string             { return filepath.Join(h.Dir, id) }
func (h *Host) Touch(id string)                         { h.mu.Lock(); h.touched[id]++; h.mu.Unlock() }
func (h *Host) Wake(_ context.Context, id string) error { h.Touch(id); return nil }

func (h *Host) Lock(id string) func() {
	m, _ := h.locks.LoadOrStore(id, &sync.Mutex{})
	mu := m.(*sync.Mutex)
	mu.Lock()
	return mu.Unlock
}

func (h *Host) Sandbox(_ context.Context, id string) (supervisor.Sandbox, error) {
	rec, err := h.S.Get(id)
	if err != nil {
		return supervisor.Sandbox{}, err
	}
	sb := supervisor.Sandbox{Record: rec}
	if h.B != nil {
		if v, err := h.B.Get(context.Background(), rec.Volume); err == nil {
			sb.Path = v.Path
		}
	}
	return sb, nil
}

func (h *Host) InitPID(id string) (int, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	pid, ok := h.pids[id]
	return pid, ok
}

func (h *Host) Project(name string) (supervisor.Project, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	p, ok := h.projects[name]
	return p, ok
}

func (h *Host) MayUseProject(_ context.Context, a supervisor.Actor, name string) error {
	if !a.Named() {
		return supervisor.ErrNoActor
	}
	if h.May != nil {
		return h.May(a, name)
	}
	if a.Privileged() {
		return nil
	}
	return fmt.Errorf("uid %d may not use project %q: %w", a.UID, name, supervisor.ErrAccessDenied)
}

func (h *Host) Audit(ctx context.Context, action string, rec state.Record, err error) {
	h.AuditEntry(ctx, audit.Entry{Action: action}, rec, err)
}

func (h *Host) AuditEntry(_ context.Context, e audit.Entry, rec state.Record, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	e.Sandbox, e.Project = rec.ID, rec.Project
	h.audited = append(h.audited, Audited{Entry: e, Record: rec, Err: err})
}

func (h *Host) Create(ctx context.Context, opts supervisor.CreateOptions) (supervisor.Sandbox, error) {
	if _, err := supervisor.ActorOf(ctx); err != nil {
		return supervisor.Sandbox{}, err
	}
	if h.CreateFn != nil {
		return h.CreateFn(ctx, opts)
	}
	h.mu.Lock()
	h.ids++
	id := fmt.Sprintf("%012x", h.ids)
	h.mu.Unlock()
	rec := state.Record{ID: id, Name: opts.Name, Project: opts.Project, Owner: opts.Owner, State: state.Ready,
		Base: "base-" + id, Volume: "sb-" + id, Unit: "sandbox-" + id + ".scope", Created: time.Now().UTC()}
	if err := h.S.Create(rec); err != nil {
		return supervisor.Sandbox{}, err
	}
	return supervisor.Sandbox{Record: rec}, nil
}

func (h *Host) SandboxChanges(ctx context.Context, base, now cowfs.Volume) ([]cowfs.Change, error) {
	changes, err := h.B.Changes(ctx, base, now)
	if err != nil {
		return nil, err
	}
	out := changes[:0]
	for _, c := range changes {
		if c.Path == "." && c.Kind == cowfs.Metadata {
			continue
		}
		out = append(out, c)
	}
	return out, nil
}

func (h *Host) FilterChanges(_ context.Context, _ string, _, _ cowfs.Volume, changes []cowfs.Change) ([]cowfs.Change, int, error) {
	if h.Ignore == nil {
		return changes, 0, nil
	}
	var out []cowfs.Change
	for _, c := range changes {
		if !h.Ignore(c) {
			out = append(out, c)
		}
	}
	return out, len(changes) - len(out), nil
}

func (h *Host) WithChanges(ctx context.Context, id, what string, fn func(base, now cowfs.Volume, changes []cowfs.Change, ignored int) error) error {
	defer h.Lock(id)()
	rec, err := h.S.Get(id)
	if err != nil {
		return err
	}
	base, err := h.B.Get(ctx, rec.Base)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	vol, err := h.B.Get(ctx, rec.Volume)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	now, err := h.B.Snapshot(ctx, vol, "diff-"+id, true)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	defer func() { _ = h.B.Delete(context.WithoutCancel(ctx), now) }()
	changes, err := h.SandboxChanges(ctx, base, now)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	changes, ignored, err := h.FilterChanges(ctx, rec.Project, base, now, changes)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if err := fn(base, now, changes, ignored); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

func (h *Host) FrozenSnapshot(ctx context.Context, _ state.Record, vol cowfs.Volume, name string) (cowfs.Volume, error) {
	return h.B.Snapshot(ctx, vol, name, true)
}
