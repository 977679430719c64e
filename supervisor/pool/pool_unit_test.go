package pool_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/cowfs/cowfsfake"
	"github.com/sandboxd/sandboxd/cowfs/cowfstest"
	"github.com/sandboxd/sandboxd/supervisor"
	"github.com/sandboxd/sandboxd/supervisor/hosttest"
	"github.com/sandboxd/sandboxd/supervisor/pool"
	"github.com/sandboxd/sandboxd/supervisor/state"
)

// fakeHost is hosttest's Host with the core's pool extras: a pooled
// record made like the create it copies, and a claim that renames it.
type fakeHost struct {
	*hosttest.Host
	creating atomic.Int32
	ids      atomic.Int32
	// refuse makes CreatePooled fail (a bound reached).
	refuse atomic.Bool
}

func (f *fakeHost) CreatePooled(ctx context.Context, like state.Record) (supervisor.Sandbox, error) {
	if f.refuse.Load() {
		return supervisor.Sandbox{}, fmt.Errorf("uid %d is at its limit: %w", like.Owner, supervisor.ErrLimitReached)
	}
	rec := like
	rec.ID, rec.State, rec.Pool, rec.Created = fmt.Sprintf("p%011d", f.ids.Add(1)), state.Ready, true, time.Now().UTC()
	if err := f.S.Create(rec); err != nil {
		return supervisor.Sandbox{}, err
	}
	return supervisor.Sandbox{Record: rec}, nil
}

func (f *fakeHost) Claim(ctx context.Context, id string, want state.Record, ttl time.Duration) (supervisor.Sandbox, error) {
	for _, e := range f.S.Entries() {
		if want.Name != "" && e.Name == want.Name {
			return supervisor.Sandbox{}, fmt.Errorf("name %q: %w", want.Name, supervisor.ErrExists)
		}
	}
	rec, err := f.S.Update(id, func(r *state.Record) error {
		r.Pool, r.Name = false, want.Name
		if ttl > 0 {
			r.Expires = time.Now().Add(ttl)
		}
		return nil
	})
	return supervisor.Sandbox{Record: rec}, err
}

func (f *fakeHost) Creating() int { return int(f.creating.Load()) }

// fakeChanges says a project changed once Write was called after a mark.
type fakeChanges struct {
	mu      sync.Mutex
	writes  int
	writers error // Mark's refusal (a writer on the project)
}

func (c *fakeChanges) Mark(dir string) (pool.Mark, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.writes, c.writers
}

func (c *fakeChanges) Unchanged(m pool.Mark) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return m.(int) == c.writes
}

func (c *fakeChanges) Write() { c.mu.Lock(); c.writes++; c.mu.Unlock() }

type env struct {
	h       *fakeHost
	p       *pool.Pools
	changes *fakeChanges
	want    state.Record
	ctx     context.Context
}

func newEnv(t *testing.T, size int) *env {
	t.Helper()
	ctx := supervisor.WithCaller(context.Background(), 1000)
	dir := t.TempDir()
	fs, err := cowfsfake.Open(ctx, filepath.Join(dir, "root"))
	if err != nil {
		t.Fatal(err)
	}
	project, err := fs.MakeProject(ctx, filepath.Join(dir, "web"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cowfstest.DeleteAll(context.Background(), fs) })
	h := &fakeHost{Host: hosttest.New(t, fs, nil)}
	h.AddProject(supervisor.Project{Name: "web", Location: project.Path})
	h.May = func(a supervisor.Actor, project string) error { return nil }
	c := &fakeChanges{}
	p := pool.New(h, pool.Config{Changes: c, Size: func(string) int { return size }})
	t.Cleanup(h.Close)
	return &env{h: h, p: p, changes: c, ctx: ctx,
		want: state.Record{Project: "web", ProjectLocation: project.Path, Owner: 1000, Network: "none", Limits: []byte(`{}`)}}
}

// create is the core's create as far as the pool sees it: the Claim
// hook first, else a full create (a record).
func (e *env) create(t *testing.T, want state.Record) (state.Record, bool) {
	t.Helper()
	for _, claim := range e.h.Hooks().Claim.Funcs() {
		sb, ok, err := claim(e.ctx, want, time.Hour)
		if err != nil {
			t.Fatalf("claim: %v", err)
		}
		if ok {
			return sb.Record, true
		}
	}
	rec := want
	rec.ID = fmt.Sprintf("c%011d", e.h.ids.Add(1))
	return e.h.AddSandbox(t, rec), false
}

func (e *env) status(t *testing.T) pool.Status {
	t.Helper()
	for _, s := range e.p.List(0, true) {
		if s.Project == "web" && s.Owner == 1000 {
			return s
		}
	}
	return pool.Status{}
}

func (e *env) waitReady(t *testing.T, n int) pool.Status {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		s := e.status(t)
		if s.Ready == n && s.Making == 0 {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("the pool never had %d ready: %+v", n, s)
		}
		time.Sleep(time.Millisecond)
	}
}

func pooled(t *testing.T, h *fakeHost) int {
	t.Helper()
	n := 0
	for _, e := range h.S.Entries() {
		if e.Pool {
			n++
		}
	}
	return n
}

func TestUnitAPoolStartsWithAFirstCreateAndIsClaimedAndRefilled(t *testing.T) {
	e := newEnv(t, 3)
	if _, claimed := e.create(t, e.want); claimed {
		t.Fatal("the first create was a claim: there was no pool yet")
	}
	e.waitReady(t, 3)
	want := e.want
	want.Name = "mine"
	rec, claimed := e.create(t, want)
	if !claimed || rec.Pool || rec.Name != "mine" || rec.Expires.IsZero() {
		t.Fatalf("a create like the first: %+v, claimed %v", rec, claimed)
	}
	s := e.waitReady(t, 3)
	if s.Claims != 1 || s.Misses != 0 || pooled(t, e.h) != 3 {
		t.Fatalf("after a claim and the refill: %+v, %d pooled", s, pooled(t, e.h))
	}
}

func TestUnitAChangedProjectIsNeverHandedOut(t *testing.T) {
	e := newEnv(t, 2)
	e.create(t, e.want)
	e.waitReady(t, 2)
	e.changes.Write()
	if rec, claimed := e.create(t, e.want); claimed {
		t.Fatalf("a create after a write claimed %s", rec.ID)
	}
	if s := e.status(t); s.Stale != 2 || s.Claims != 0 {
		t.Fatalf("after a write: %+v; want both stale", s)
	}
	// Made again after the write, and claimed.
	e.waitReady(t, 2)
	if _, claimed := e.create(t, e.want); !claimed {
		t.Fatal("a create after the refill was not a claim")
	}
}

func TestUnitOtherOptionsMakeAFullCreateAndThePoolLearnsThem(t *testing.T) {
	e := newEnv(t, 2)
	e.create(t, e.want)
	e.waitReady(t, 2)
	other := e.want
	other.Limits = []byte(`{"MemoryMax":536870912}`)
	if _, claimed := e.create(t, other); claimed {
		t.Fatal("a create with other limits claimed a sandbox made without them")
	}
	// One create with other options leaves the pool as it was (a caller
	// alternating them must not make it remake its sandboxes each time).
	if _, claimed := e.create(t, e.want); !claimed {
		t.Fatal("a create like the first, after one with other options, was not a claim")
	}
	e.waitReady(t, 2)
	for range 2 {
		if _, claimed := e.create(t, other); claimed {
			t.Fatal("a create with other limits claimed a sandbox made without them")
		}
	}
	e.waitReady(t, 2)
	rec, claimed := e.create(t, other)
	if !claimed || string(rec.Limits) != `{"MemoryMax":536870912}` {
		t.Fatalf("a create like the last: claimed %v, limits %s", claimed, rec.Limits)
	}
	// Another owner's create is no claim of this owner's pool.
	stranger := e.want
	stranger.Owner = 1001
	if _, claimed := e.create(t, stranger); claimed {
		t.Fatal("another owner's create claimed uid 1000's sandbox")
	}
}

func TestUnitARefusedRefillSaysWhyAndAClaimRetries(t *testing.T) {
	e := newEnv(t, 2)
	e.h.refuse.Store(true)
	e.create(t, e.want)
	deadline := time.Now().Add(30 * time.Second)
	for e.status(t).Blocked == "" {
		if time.Now().After(deadline) {
			t.Fatalf("a refused refill is not said: %+v", e.status(t))
		}
		time.Sleep(time.Millisecond)
	}
	if s := e.status(t); s.Ready != 0 || !strings.Contains(s.Blocked, "limit") {
		t.Fatalf("a pool whose refill is refused: %+v", s)
	}
	e.h.refuse.Store(false)
	if _, claimed := e.create(t, e.want); claimed {
		t.Fatal("a claim from an empty pool")
	}
	e.waitReady(t, 2)
}

func TestUnitSandboxesPooledByAPreviousDaemonAreDestroyedAndMadeAgain(t *testing.T) {
	e := newEnv(t, 2)
	old := e.want
	old.ID, old.Pool = "p00000000old", true
	e.h.AddSandbox(t, old)
	for _, f := range e.h.Hooks().AfterReconcile.Funcs() {
		if err := f(context.Background(), &supervisor.Report{}); err != nil {
			t.Fatal(err)
		}
	}
	e.waitReady(t, 2)
	if _, err := e.h.S.Get(old.ID); !errors.Is(err, state.ErrNotFound) {
		t.Fatalf("the previous daemon's pooled sandbox: %v; want destroyed", err)
	}
	if _, claimed := e.create(t, e.want); !claimed {
		t.Fatal("no claim from the pool made again")
	}
}

func TestUnitASandboxDestroyedByOthersLeavesThePool(t *testing.T) {
	e := newEnv(t, 2)
	e.create(t, e.want)
	e.waitReady(t, 2)
	var victim string
	for _, r := range e.h.S.Entries() {
		if r.Pool {
			victim = r.ID
		}
	}
	e.h.refuse.Store(true) // no refill: the pool shows what it lost
	if err := e.h.Destroy(context.Background(), victim); err != nil {
		t.Fatal(err)
	}
	if s := e.status(t); s.Ready != 1 {
		t.Fatalf("after an eviction of a pooled sandbox: %+v", s)
	}
}
