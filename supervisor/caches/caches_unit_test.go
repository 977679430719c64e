package caches

// The room's logic without root: over a fake Host (hosttest) and a pool
// of plain directories (cowfsfake), as any user. What needs root (the
// mount into a sandbox, a cache filesystem's image) is the testbed's:
// tests/integration TestCache*, TestHostileCache*.

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/cowfs/cowfsfake"
	"github.com/sandboxd/sandboxd/runtime/nsinit"
	"github.com/sandboxd/sandboxd/supervisor"
	"github.com/sandboxd/sandboxd/supervisor/hosttest"
	"github.com/sandboxd/sandboxd/supervisor/state"
)

// pool is a fake pool of directories (cowfsfake) whose calls are
// counted by method. It claims quotas where quota says so: the fake
// records them (Usage reports them) and enforces none, which is all the
// room's logic needs; their hold is the testbed's to prove.
type pool struct {
	*cowfsfake.Backend
	root  string
	quota bool

	mu    sync.Mutex
	calls map[string]int
}

func newPool(t *testing.T) *pool {
	root := filepath.Join(t.TempDir(), "sandboxd")
	b, err := cowfsfake.Open(context.Background(), root)
	if err != nil {
		t.Fatal(err)
	}
	p := &pool{Backend: b, root: root, quota: true, calls: map[string]int{}}
	b.SetHook(func(method, _ string) error {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.calls[method]++
		return nil
	})
	return p
}

func (p *pool) Info() cowfs.Info {
	i := p.Backend.Info()
	i.Capabilities.Quota = p.quota
	return i
}

// count is how many times method was called.
func (p *pool) count(method string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls[method]
}

// quotaOf is the quota recorded on owner's cache volume.
func (p *pool) quotaOf(t *testing.T) uint64 {
	t.Helper()
	ctx := context.Background()
	v, err := p.Get(ctx, cacheName(owner))
	if err != nil {
		t.Fatal(err)
	}
	u, err := p.Usage(ctx, v)
	if err != nil {
		t.Fatal(err)
	}
	return u.Quota
}

// owner is the test's own uid: the cache's root is given to it, which
// needs no privilege.
var owner = uint32(os.Getuid())

func record(id string) state.Record { return state.Record{ID: id, Project: "web", Owner: owner} }

// launch runs the BeforeLaunch hooks for rec, as a create does.
func launch(h *hosttest.Host, rec state.Record) {
	for _, f := range h.Hooks().BeforeLaunch.Funcs() {
		f(context.Background(), rec)
	}
}

// build runs the Spec hooks for rec, as a start does before the init
// builds its world; release is what runs once it built it.
func build(h *hosttest.Host, rec state.Record) (spec nsinit.Spec, release func()) {
	var rels []func()
	for _, f := range h.Hooks().Spec.Funcs() {
		rels = append(rels, f(context.Background(), rec, &spec))
	}
	return spec, func() {
		for _, r := range rels {
			r()
		}
	}
}

// commandEnv is what the CommandEnv hooks add for rec.
func commandEnv(h *hosttest.Host, rec state.Record) []string {
	var env []string
	for _, f := range h.Hooks().CommandEnv.Funcs() {
		env = append(env, f(rec)...)
	}
	return env
}

// done reports whether ch is closed within d.
func done(ch <-chan struct{}, d time.Duration) bool {
	select {
	case <-ch:
		return true
	case <-time.After(d):
		return false
	}
}

// A start holds its owner's lock shared from the cache's making until
// the init built its world: two creates share it, and a Clear waits for
// both.
func TestUnitClearWaitsForBuildsThatShareTheOwnersLock(t *testing.T) {
	pool := newPool(t)
	h := hosttest.New(t, pool, nil)
	c := New(h, Config{Enabled: true})
	spec1, release1 := build(h, record("aaaaaaaaaaaa"))
	if want := filepath.Join(pool.root, cacheName(owner)); spec1.Cache != want {
		t.Fatalf("the init's spec has cache %q; want the owner's volume %s", spec1.Cache, want)
	}
	second := make(chan struct{})
	var spec2 nsinit.Spec
	var release2 func()
	go func() {
		defer close(second)
		spec2, release2 = build(h, record("bbbbbbbbbbbb"))
	}()
	if !done(second, 5*time.Second) {
		t.Fatal("a second create of the owner's waited for the first's build: the lock is not shared")
	}
	if spec2.Cache != spec1.Cache {
		t.Errorf("the second sandbox's cache is %q; want the owner's one, %q", spec2.Cache, spec1.Cache)
	}
	cleared := make(chan struct{})
	var clearErr error
	go func() {
		defer close(cleared)
		clearErr = c.Clear(supervisor.WithCaller(context.Background(), owner), owner)
	}()
	if done(cleared, 200*time.Millisecond) {
		t.Fatal("Clear did not wait for the builds under way")
	}
	release1()
	if done(cleared, 100*time.Millisecond) {
		t.Fatal("Clear did not wait for the second build")
	}
	release2()
	if !done(cleared, 5*time.Second) {
		t.Fatal("Clear still waits once both builds ended")
	}
	if clearErr != nil {
		t.Fatal(clearErr)
	}
	c.mu.Lock()
	left := len(c.owners)
	c.mu.Unlock()
	if left != 0 {
		t.Errorf("%d owners' locks kept after all let go; want none", left)
	}
}

// With no sandbox of the owner's recorded, Clear deletes the volume and
// makes it anew.
func TestUnitClearRemakesTheVolumeWithNoSandboxOfTheOwners(t *testing.T) {
	pool := newPool(t)
	h := hosttest.New(t, pool, nil)
	c := New(h, Config{Enabled: true})
	launch(h, record("aaaaaaaaaaaa"))
	dir := filepath.Join(pool.root, cacheName(owner))
	if err := os.WriteFile(filepath.Join(dir, "marker"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := c.Clear(context.Background(), owner); err != nil {
		t.Fatal(err)
	}
	if creates, deletes := pool.count("Create"), pool.count("Delete"); creates != 2 || deletes != 1 {
		t.Errorf("Clear with no sandbox: %d creates and %d deletes in all; want the volume made, deleted and made again (2, 1)", creates, deletes)
	}
	if _, err := os.Lstat(filepath.Join(dir, "marker")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the marker after Clear: %v; want it gone", err)
	}
	if st, err := os.Stat(dir); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("the cache volume after Clear: %v, %v; want it made again, mode 0700", st, err)
	}
	a := h.Audits()
	if len(a) != 1 || a[0].Entry.Action != "clear-cache" || a[0].Err != nil {
		t.Errorf("audited %+v; want one clear-cache that succeeded", a)
	}
}

// With a sandbox of the owner's recorded (it may have the cache
// mounted), Clear empties the volume in place, removing a symlink
// planted there without following it.
func TestUnitClearEmptiesInPlaceWhileASandboxOfTheOwnersIsRecorded(t *testing.T) {
	pool := newPool(t)
	h := hosttest.New(t, pool, nil)
	c := New(h, Config{Enabled: true})
	rec := h.AddSandbox(t, record("aaaaaaaaaaaa"))
	h.AddSandbox(t, state.Record{ID: "bbbbbbbbbbbb", Project: "web", Owner: owner + 1})
	launch(h, rec)
	dir := filepath.Join(pool.root, cacheName(owner))
	outside := filepath.Join(t.TempDir(), "kept")
	if err := os.WriteFile(outside, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "pip", "wheels"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := c.Clear(context.Background(), owner); err != nil {
		t.Fatal(err)
	}
	if deletes := pool.count("Delete"); deletes != 0 {
		t.Errorf("Clear with a sandbox of the owner's deleted %d volumes; want it emptied in place", deletes)
	}
	if names, err := os.ReadDir(dir); err != nil || len(names) != 0 {
		t.Errorf("the cache after Clear holds %v (%v); want it empty", names, err)
	}
	if _, err := os.Stat(outside); err != nil {
		t.Errorf("the symlink's target outside the cache: %v; want it kept", err)
	}
}

// An owner without a cache has nothing to clear; a daemon without
// caches refuses, and audits the refusal.
func TestUnitClearWithNothingToClear(t *testing.T) {
	pool := newPool(t)
	h := hosttest.New(t, pool, nil)
	if err := New(h, Config{Enabled: true}).Clear(context.Background(), owner); err != nil {
		t.Errorf("Clear of no cache: %v; want nothing to do", err)
	}
	if creates := pool.count("Create"); creates != 0 {
		t.Errorf("Clear of no cache made %d volumes; want none", creates)
	}
	h = hosttest.New(t, pool, nil)
	err := New(h, Config{}).Clear(context.Background(), owner)
	if !errors.Is(err, cowfs.ErrUnsupported) || !strings.Contains(err.Error(), "sandboxes have no caches here") {
		t.Errorf("Clear without caches: %v; want ErrUnsupported, saying there are none", err)
	}
	if a := h.Audits(); len(a) != 1 || a[0].Entry.Action != "clear-cache" || !errors.Is(a[0].Err, cowfs.ErrUnsupported) {
		t.Errorf("audited %+v; want the refused clear-cache", a)
	}
	if spec, release := build(h, record("aaaaaaaaaaaa")); spec.Cache != "" {
		t.Errorf("without caches a sandbox's spec has cache %q; want none", spec.Cache)
	} else {
		release()
	}
}

// The configured quota is set once a daemon start (again after a
// restart, which may have changed it); one taken out of the
// configuration is lifted, and none is not set where none was.
func TestUnitQuotaSetOnceADaemonStart(t *testing.T) {
	pool := newPool(t)
	const quota = 1 << 20
	h := hosttest.New(t, pool, nil)
	New(h, Config{Enabled: true, Quota: quota})
	for _, id := range []string{"aaaaaaaaaaaa", "bbbbbbbbbbbb", "cccccccccccc"} {
		launch(h, record(id))
		_, release := build(h, record(id))
		release()
	}
	if n, q := pool.count("SetQuota"), pool.quotaOf(t); n != 1 || q != quota {
		t.Errorf("quota set %d times, now %d; want %d set once", n, q, quota)
	}
	// A restart: the room anew, over the same pool.
	h = hosttest.New(t, pool, nil)
	New(h, Config{Enabled: true, Quota: quota})
	launch(h, record("aaaaaaaaaaaa"))
	launch(h, record("aaaaaaaaaaaa"))
	if n := pool.count("SetQuota"); n != 2 {
		t.Errorf("quota set %d times in all; want once more after a restart", n)
	}
	// A restart with no quota configured: the old one is lifted, once.
	h = hosttest.New(t, pool, nil)
	New(h, Config{Enabled: true})
	launch(h, record("aaaaaaaaaaaa"))
	launch(h, record("aaaaaaaaaaaa"))
	if n, q := pool.count("SetQuota"), pool.quotaOf(t); n != 3 || q != 0 {
		t.Errorf("quota set %d times in all, now %d; want it lifted, once", n, q)
	}
	// And again: none was, none is set.
	h = hosttest.New(t, pool, nil)
	New(h, Config{Enabled: true})
	launch(h, record("aaaaaaaaaaaa"))
	if n := pool.count("SetQuota"); n != 3 {
		t.Errorf("quota set %d times in all; want none set where none was", n)
	}
}

// A pool that cannot hold a cache to its quota gets no cache: sandboxes
// are made without, and that is logged once.
func TestUnitNoCacheWhereThePoolCannotHoldItsQuota(t *testing.T) {
	pool := newPool(t)
	pool.quota = false
	h := hosttest.New(t, pool, nil)
	var logged bytes.Buffer
	h.L = slog.New(slog.NewTextHandler(&logged, nil))
	New(h, Config{Enabled: true, Quota: 1 << 20})
	for range 2 {
		launch(h, record("aaaaaaaaaaaa"))
		spec, release := build(h, record("aaaaaaaaaaaa"))
		release()
		if spec.Cache != "" {
			t.Errorf("the spec has cache %q; want none", spec.Cache)
		}
	}
	if creates := pool.count("Create"); creates != 0 {
		t.Errorf("%d volumes made; want none", creates)
	}
	if n := strings.Count(logged.String(), "sandboxes are made without their owner's cache"); n != 1 {
		t.Errorf("logged %d times that sandboxes have no cache; want once:\n%s", n, logged.String())
	}
}

// A sandbox made with NoCache (a promotion's checks) has no cache: none
// made for it, none in its spec, no lock of the owner's held.
func TestUnitNoCacheSandboxHasNone(t *testing.T) {
	pool := newPool(t)
	h := hosttest.New(t, pool, nil)
	c := New(h, Config{Enabled: true})
	rec := record("aaaaaaaaaaaa")
	rec.NoCache = true
	launch(h, rec)
	spec, release := build(h, rec)
	defer release()
	if spec.Cache != "" {
		t.Errorf("a NoCache sandbox's spec has cache %q; want none", spec.Cache)
	}
	if creates := pool.count("Create"); creates != 0 {
		t.Errorf("%d volumes made for a NoCache sandbox; want none", creates)
	}
	cleared := make(chan struct{})
	go func() {
		defer close(cleared)
		_ = c.Clear(context.Background(), owner)
	}()
	if !done(cleared, 5*time.Second) {
		t.Error("Clear waits for a NoCache sandbox's build")
	}
}

// A sandbox's commands get the cache's variables only while its init
// has the cache mounted.
func TestUnitCommandEnvOnlyWhileMounted(t *testing.T) {
	pool := newPool(t)
	h := hosttest.New(t, pool, nil)
	c := New(h, Config{Enabled: true})
	c.mountedIn = func(pid int) (bool, error) {
		if pid == 3 {
			return false, errors.New("no such process")
		}
		return pid == 1, nil
	}
	with, without, unknown := h.AddSandbox(t, record("aaaaaaaaaaaa")), h.AddSandbox(t, record("bbbbbbbbbbbb")), h.AddSandbox(t, record("cccccccccccc"))
	ctx := context.Background()
	if env := commandEnv(h, with); env != nil {
		t.Errorf("before its init started, a sandbox's commands get %q; want nothing", env)
	}
	for pid, rec := range map[int]state.Record{1: with, 2: without, 3: unknown} {
		if err := h.Start(ctx, rec.ID, pid, false); err != nil {
			t.Fatal(err)
		}
	}
	if env := commandEnv(h, with); !slices.Equal(env, cacheEnv) || !slices.Contains(env, "PIP_CACHE_DIR="+nsinit.CachePath+"/pip") {
		t.Errorf("with the cache mounted, commands get %q; want %q", env, cacheEnv)
	}
	if env := commandEnv(h, without); env != nil {
		t.Errorf("without the cache mounted, commands get %q; want nothing", env)
	}
	if env := commandEnv(h, unknown); env != nil {
		t.Errorf("where the mounts cannot be read, commands get %q; want nothing", env)
	}
	h.Stop(with.ID)
	if env := commandEnv(h, with); env != nil {
		t.Errorf("after its init stopped, commands get %q; want nothing", env)
	}
	// An adopted init (after a daemon's restart) is asked again.
	if err := h.Start(ctx, with.ID, 1, true); err != nil {
		t.Fatal(err)
	}
	if env := commandEnv(h, with); !slices.Equal(env, cacheEnv) {
		t.Errorf("an adopted init with the cache mounted: commands get %q; want %q", env, cacheEnv)
	}
}

// A cache that could not be idmapped into a sandbox's user namespace is
// logged, once per owner.
func TestUnitIdmapFailureLoggedOncePerOwner(t *testing.T) {
	h := hosttest.New(t, newPool(t), nil)
	var logged bytes.Buffer
	h.L = slog.New(slog.NewTextHandler(&logged, nil))
	New(h, Config{Enabled: true})
	failed := &nsinit.Mounts{CacheErr: errors.New("idmapping: operation not permitted")}
	for _, rec := range []state.Record{record("aaaaaaaaaaaa"), record("bbbbbbbbbbbb"), {ID: "cccccccccccc", Owner: owner + 1}} {
		for _, f := range h.Hooks().Idmapped.Funcs() {
			f(rec, failed)
			f(rec, &nsinit.Mounts{})
		}
	}
	if n := strings.Count(logged.String(), "sandboxes are made without their owner's cache"); n != 2 {
		t.Errorf("logged %d times; want once for each of the two owners:\n%s", n, logged.String())
	}
}
