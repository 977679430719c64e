package projects

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/cowfs/cowfsfake"
	"github.com/sandboxd/sandboxd/supervisor/audit"
	"github.com/sandboxd/sandboxd/supervisor/state"
	"github.com/sandboxd/sandboxd/units/unitsfake"
)

// The registry's logic without root: a fake pool of directories, a fake
// systemd and a store in a temporary directory.

type fixture struct {
	reg     *Registry
	pool    *cowfsfake.Backend
	units   *unitsfake.Manager
	store   *state.Store
	dir     string // the fake pool's directory, where projects are made
	audited []audit.Entry
}

func newFixture(t *testing.T, cfg Config) *fixture {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	pool, err := cowfsfake.Open(ctx, filepath.Join(dir, "sandboxd"))
	if err != nil {
		t.Fatal(err)
	}
	store, err := state.Open(filepath.Join(t.TempDir(), "state.db"), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	f := &fixture{pool: pool, units: unitsfake.New(), store: store, dir: dir}
	var admission sync.Mutex
	cfg.Backend, cfg.Units, cfg.Store, cfg.Admission = pool, f.units, store, &admission
	cfg.Audit = func(_ context.Context, e audit.Entry, rec state.Record, err error) {
		e.Project = rec.Project
		if err != nil {
			e.Error = err.Error()
		}
		f.audited = append(f.audited, e)
	}
	cfg.Caller = func(context.Context) string { return "1000" }
	f.reg = New(cfg)
	return f
}

// project makes a project volume in the fake pool, with mode.
func (f *fixture) project(t *testing.T, name string, mode os.FileMode) string {
	t.Helper()
	vol, err := f.pool.MakeProject(context.Background(), filepath.Join(f.dir, name))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(vol.Path, mode); err != nil {
		t.Fatal(err)
	}
	return vol.Path
}

func TestUnitNames(t *testing.T) {
	for _, name := range []string{"web", "a.b-c_d", strings.Repeat("x", 40)} {
		if err := CheckNew(name, Access{}); err != nil {
			t.Errorf("CheckNew(%q) = %v, want nil", name, err)
		}
	}
	for _, name := range []string{"", ".hidden", "-dash", "a/b", "a b"} {
		if err := CheckNew(name, Access{}); !errors.Is(err, ErrInvalidProject) || !strings.Contains(err.Error(), NameRule) {
			t.Errorf("CheckNew(%q) = %v, want ErrInvalidProject stating the rule", name, err)
		}
	}
	if err := CheckNew("web", Access{Users: []string{"bob", "1000"}, Groups: []string{"wheel"}}); err != nil {
		t.Errorf("CheckNew with good users and groups = %v", err)
	}
	if err := CheckNew("web", Access{Users: []string{"bad name"}}); !errors.Is(err, ErrInvalidProject) || !strings.Contains(err.Error(), `user "bad name" is not a user name or id`) {
		t.Errorf("CheckNew with a bad user = %v", err)
	}
	if got := QuoteName(strings.Repeat("y", 50)); got != `"`+strings.Repeat("y", 40)+`"...` {
		t.Errorf("QuoteName of a long name = %s", got)
	}
	if got := TakenBy(Project{Name: "web", Location: "/p", Origin: OriginConfig}); !strings.Contains(got, "defined in sandboxd.toml") {
		t.Errorf("TakenBy of the configuration's = %q", got)
	}
	if err := CheckFreezeUnits([]string{"postgresql.service"}); err != nil {
		t.Errorf("CheckFreezeUnits = %v", err)
	}
	if err := CheckFreezeUnits([]string{"dbus.service"}); !errors.Is(err, ErrInvalidProject) || !Untouchable("sandboxd.service") {
		t.Errorf("CheckFreezeUnits of the bus = %v, want it refused", err)
	}
}

func TestUnitRegistrySetRemoveList(t *testing.T) {
	f := newFixture(t, Config{Locations: map[string]string{"web": "/pool/web"}, Access: map[string]Access{"web": {Users: []string{"bob"}}}})
	f.reg.Register(state.Project{Name: "data", Location: "/pool/data", Users: []string{"1000"}})
	f.reg.Register(state.Project{Name: "app", Location: "/pool/v", Adoption: &state.Adoption{How: state.AdoptMount, Path: "/srv/app"}})
	got := f.reg.List()
	names := []string{}
	for _, p := range got {
		names = append(names, p.Name)
	}
	if !slices.Equal(names, []string{"app", "data", "web"}) {
		t.Fatalf("List = %v, want app, data, web by name", names)
	}
	if p, ok := f.reg.Get("web"); !ok || p.Origin != OriginConfig || p.Location != "/pool/web" {
		t.Errorf("Get(web) = %+v, %v", p, ok)
	}
	if p, _ := f.reg.Get("app"); p.Path() != "/srv/app" || !slices.Equal(p.Places(), []string{"/pool/v", "/srv/app"}) {
		t.Errorf("an adopted project is seen at %s, places %v", p.Path(), p.Places())
	}
	if _, a, _ := f.reg.getAccess("data"); !reflect.DeepEqual(a, Access{Users: []string{"1000"}}) {
		t.Errorf("access of data = %+v", a)
	}
	f.reg.Forget("data")
	if _, ok := f.reg.Get("data"); ok || f.reg.Location("data") != "" {
		t.Error("data is still registered after Forget")
	}
}

func TestUnitAddRemove(t *testing.T) {
	f := newFixture(t, Config{Locations: map[string]string{"web": "/elsewhere"}})
	ctx := context.Background()
	loc := f.project(t, "data", 0o755)
	if err := f.reg.Add(ctx, "web", loc, Access{}); !errors.Is(err, ErrExists) {
		t.Errorf("Add of the configuration's name = %v, want ErrExists", err)
	}
	if err := f.reg.Add(ctx, "bad", filepath.Join(f.dir, "none"), Access{}); !errors.Is(err, ErrInvalidProject) || !strings.Contains(err.Error(), "is not a volume of the pool") {
		t.Errorf("Add of no volume = %v, want ErrInvalidProject", err)
	}
	if err := f.reg.Add(ctx, "data", loc+"/", Access{Groups: []string{"wheel"}}); err != nil {
		t.Fatal(err)
	}
	if p, ok := f.reg.Get("data"); !ok || p.Location != loc || p.Origin != OriginAdded {
		t.Errorf("Get(data) = %+v, %v; want it added at %s, cleaned", p, ok, loc)
	}
	if recs, err := f.store.Projects(); err != nil || len(recs) != 1 || recs[0].Name != "data" || !slices.Equal(recs[0].Groups, []string{"wheel"}) {
		t.Errorf("recorded projects = %+v, %v", recs, err)
	}
	if err := f.reg.Remove(ctx, "web"); !errors.Is(err, ErrInvalidProject) {
		t.Errorf("Remove of the configuration's = %v, want ErrInvalidProject", err)
	}
	if err := f.reg.Remove(ctx, "nope"); !errors.Is(err, ErrUnknownProject) {
		t.Errorf("Remove of none = %v, want ErrUnknownProject", err)
	}
	if err := f.reg.Remove(ctx, "data"); err != nil {
		t.Fatal(err)
	}
	if recs, err := f.store.Projects(); err != nil || len(recs) != 0 {
		t.Errorf("recorded projects after Remove = %+v, %v", recs, err)
	}
	var actions []string
	for _, e := range f.audited {
		actions = append(actions, e.Action+":"+e.Project+":"+e.Result)
	}
	if len(f.audited) != 6 || f.audited[2].Action != "project-add" || f.audited[2].Location != loc || f.audited[2].Error != "" ||
		f.audited[5].Action != "project-remove" || f.audited[5].Location != loc {
		t.Errorf("audited %v (%+v)", actions, f.audited)
	}
}

func TestUnitLoad(t *testing.T) {
	f := newFixture(t, Config{Locations: map[string]string{"web": "/pool/web"}})
	for _, p := range []state.Project{{Name: "web", Location: "/pool/other"}, {Name: "data", Location: "/pool/data", Freeze: []string{"db.service"}}} {
		if err := f.store.AddProject(p); err != nil {
			t.Fatal(err)
		}
	}
	var hooked []string
	f.reg.cfg.OnLoad = func() []func(context.Context, []state.Project) []state.Project {
		return []func(context.Context, []state.Project) []state.Project{func(_ context.Context, recs []state.Project) []state.Project {
			for _, r := range recs {
				hooked = append(hooked, r.Name)
			}
			return recs
		}}
	}
	shadowed, err := f.reg.Load()
	if err != nil || len(shadowed) != 1 || shadowed[0].Name != "web" || shadowed[0].Location != "/pool/other" {
		t.Fatalf("Load = %+v, %v; want web shadowed", shadowed, err)
	}
	if p, _ := f.reg.Get("web"); p.Location != "/pool/web" {
		t.Errorf("web at %s: the configuration's must win", p.Location)
	}
	if p, ok := f.reg.Get("data"); !ok || !slices.Equal(p.Freeze, []string{"db.service"}) {
		t.Errorf("data = %+v, %v", p, ok)
	}
	if len(hooked) != 2 {
		t.Errorf("the load hooks saw %v", hooked)
	}
	if calls := f.units.Calls(); !slices.Contains(calls, unitsfake.Call{Method: "Thaw", Name: "db.service"}) {
		t.Errorf("a recorded project's writers are not thawed on load: %v", calls)
	}
}

func TestUnitMayUse(t *testing.T) {
	f := newFixture(t, Config{})
	ctx := context.Background()
	uid, gid := uint32(os.Getuid()), uint32(os.Getgid())
	f.reg.Register(state.Project{Name: "own", Location: f.project(t, "own", 0o755)})
	f.reg.Register(state.Project{Name: "group", Location: f.project(t, "group", 0o775)})
	f.reg.Register(state.Project{Name: "listed", Location: f.project(t, "listed", 0o700), Users: []string{"4242"}, Groups: []string{"4343"}})
	for _, c := range []struct {
		who     Who
		project string
		ok      bool
		says    string
	}{
		{Who{UID: uid}, "own", true, ""},
		{Who{UID: uid + 1}, "own", false, "open to its directory's owner"},
		{Who{UID: uid + 1, Privileged: true}, "own", true, ""},
		{Who{UID: uid + 1, GIDs: []uint32{gid}}, "group", true, ""},
		{Who{UID: uid + 1, GIDs: []uint32{gid}}, "own", false, "its group is not"},
		{Who{UID: uid + 1}, "group", false, "of which uid"},
		{Who{UID: 4242}, "listed", true, ""},
		{Who{UID: 1, GIDs: []uint32{4343}}, "listed", true, ""},
		{Who{UID: uid}, "listed", false, "it is open to users 4242 and the members of groups 4343"},
		{Who{UID: uid + 1}, "unknown", true, ""},
	} {
		err := f.reg.MayUse(ctx, c.who, c.project)
		if c.ok != (err == nil) || !c.ok && (!errors.Is(err, ErrAccessDenied) || !strings.Contains(err.Error(), c.says)) {
			t.Errorf("MayUse(%+v, %s) = %v; want ok=%v saying %q", c.who, c.project, err, c.ok, c.says)
		}
	}
}

func TestUnitEnv(t *testing.T) {
	if got := MergeEnv([]string{"A=1", "B=2"}, []string{"B=3", "C=4"}); !slices.Equal(got, []string{"A=1", "B=3", "C=4"}) {
		t.Errorf("MergeEnv = %v", got)
	}
	f := newFixture(t, Config{Env: map[string]Env{
		"web":  {Units: []string{"nginx.service"}, Env: []string{"PORT=9", "MODE=dev"}},
		"big":  {Env: []string{"X=" + strings.Repeat("x", maxProjectEnv)}},
		"gone": {Units: []string{"gone.service"}},
	}})
	f.units.AddService("nginx.service", "active", "PORT=80", "HOST=h")
	ctx := context.Background()
	if env, err := f.reg.Env(ctx, "web"); err != nil || !slices.Equal(env, []string{"PORT=9", "HOST=h", "MODE=dev"}) {
		t.Errorf("Env(web) = %v, %v", env, err)
	}
	if env, err := f.reg.Env(ctx, "none"); err != nil || env != nil {
		t.Errorf("Env of a project with none = %v, %v", env, err)
	}
	if _, err := f.reg.Env(ctx, "big"); err == nil || !strings.Contains(err.Error(), "at most") {
		t.Errorf("Env over the bound = %v", err)
	}
	if _, err := f.reg.Env(ctx, "gone"); err == nil || !strings.Contains(err.Error(), "gone.service") {
		t.Errorf("Env of a unit not loaded = %v, want it named", err)
	}
}

func TestUnitFreezeWritersOverlap(t *testing.T) {
	f := newFixture(t, Config{})
	f.reg.Register(state.Project{Name: "data", Location: "/pool/data", Freeze: []string{"db.service"}})
	f.units.AddService("db.service", "active")
	ctx := context.Background()
	thaw1 := f.reg.FreezeWriters(ctx, "data")
	thaw2 := f.reg.FreezeWriters(ctx, "data")
	frozen := func() bool { u, _ := f.units.Unit("db.service"); return u.Frozen }
	if !frozen() {
		t.Fatal("db.service is not frozen")
	}
	thaw1()
	if !frozen() {
		t.Error("db.service thawed while an overlapping snapshot still wants it frozen")
	}
	thaw2()
	if frozen() {
		t.Error("db.service stays frozen after the last thaw")
	}
	n := 0
	for _, c := range f.units.Calls() {
		if c.Method == "Freeze" {
			n++
		}
	}
	if n != 1 {
		t.Errorf("db.service frozen %d times, want once", n)
	}
	f.reg.FreezeWriters(ctx, "unknown")() // nothing to freeze
}
