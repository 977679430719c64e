package unitsfake_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/sandboxd/sandboxd/supervisor"
	"github.com/sandboxd/sandboxd/units"
	"github.com/sandboxd/sandboxd/units/unitsfake"
)

// The fake is what the supervisor takes, as *units.Manager is.
var (
	_ supervisor.Units = (*unitsfake.Manager)(nil)
	_ supervisor.Units = (*units.Manager)(nil)
)

var ctx = context.Background()

func check(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func names(t *testing.T, m *unitsfake.Manager, patterns ...string) []string {
	t.Helper()
	list, err := m.List(ctx, patterns...)
	check(t, err)
	var out []string
	for _, u := range list {
		out = append(out, u.Name+":"+u.ActiveState+"/"+u.SubState)
	}
	return out
}

func scope(name string, pids ...int) units.Scope {
	return units.Scope{Name: name, PIDs: pids, Limits: units.Limits{MemoryMax: new(uint64(64 << 20))}}
}

func TestScopeLife(t *testing.T) {
	m := unitsfake.New()
	check(t, m.StartScope(ctx, scope("sandbox-a.scope", 10)))
	check(t, m.StartScope(ctx, scope("sandbox-b.scope", 11)))
	if err := m.StartScope(ctx, scope("sandbox-a.scope", 12)); !errors.Is(err, units.ErrExists) {
		t.Fatalf("starting a loaded scope again: %v; want ErrExists", err)
	}
	if got, want := names(t, m, "sandbox-*.scope"), []string{"sandbox-a.scope:active/running", "sandbox-b.scope:active/running"}; !slices.Equal(got, want) {
		t.Fatalf("List = %v; want %v", got, want)
	}

	check(t, m.Freeze(ctx, "sandbox-a.scope"))
	if u, _ := m.Unit("sandbox-a.scope"); !u.Frozen || *u.Scope.Limits.MemoryMax != 64<<20 || !slices.Equal(u.Scope.PIDs, []int{10}) {
		t.Fatalf("a frozen scope: %+v", u)
	}
	check(t, m.Thaw(ctx, "sandbox-a.scope"))
	if u, _ := m.Unit("sandbox-a.scope"); u.Frozen {
		t.Fatal("a thawed scope is frozen")
	}

	check(t, m.SetUsage("sandbox-a.scope", units.Usage{Memory: units.Amount{Value: 5 << 20, Known: true}}))
	u, err := m.Usage(ctx, "sandbox-a.scope")
	check(t, err)
	if u.Memory.Value != 5<<20 || u.ActiveState != "active" || u.Result != "success" || *u.Limits.MemoryMax != 64<<20 {
		t.Fatalf("Usage = %+v", u)
	}

	check(t, m.Stop(ctx, "sandbox-a.scope"))
	if err := m.Stop(ctx, "sandbox-a.scope"); !errors.Is(err, units.ErrNotFound) {
		t.Fatalf("stopping a scope not loaded: %v; want ErrNotFound", err)
	}
	if _, err := m.Usage(ctx, "sandbox-a.scope"); !errors.Is(err, units.ErrNotFound) {
		t.Fatalf("usage of a scope not loaded: %v; want ErrNotFound", err)
	}

	// A failed scope stays, stopped or not, until ResetFailed.
	check(t, m.SetState("sandbox-b.scope", "failed", "failed"))
	check(t, m.Stop(ctx, "sandbox-b.scope"))
	if got := names(t, m); !slices.Equal(got, []string{"sandbox-b.scope:failed/failed"}) {
		t.Fatalf("a failed scope after Stop: %v", got)
	}
	if err := m.StartScope(ctx, scope("sandbox-b.scope", 13)); !errors.Is(err, units.ErrExists) {
		t.Fatalf("starting over a failed scope: %v; want ErrExists", err)
	}
	check(t, m.ResetFailed(ctx, "sandbox-b.scope"))
	if got := names(t, m); len(got) != 0 {
		t.Fatalf("units after ResetFailed: %v", got)
	}
	if err := m.ResetFailed(ctx, "sandbox-b.scope"); !errors.Is(err, units.ErrNotFound) {
		t.Fatalf("ResetFailed of a scope not loaded: %v; want ErrNotFound", err)
	}
}

// What units refuses before asking systemd, the fake refuses the same.
func TestRefusesWhatUnitsRefuses(t *testing.T) {
	m := unitsfake.New()
	for _, s := range []units.Scope{
		scope("sandbox-a.service", 1), scope("../x.scope", 1), scope("sandbox-a.scope"),
		{Name: "sandbox-a.scope", PIDs: []int{1}, Slice: "a/b.slice"},
	} {
		if err := m.StartScope(ctx, s); !errors.Is(err, units.ErrInvalidName) && !strings.Contains(fmt.Sprint(err), "pid") {
			t.Errorf("StartScope(%+v): %v; want it refused", s, err)
		}
	}
	bad := units.Scope{Name: "sandbox-a.scope", PIDs: []int{1}, Limits: units.Limits{TasksMax: new(uint64(0))}}
	if err := m.StartScope(ctx, bad); !errors.Is(err, units.ErrInvalidLimits) {
		t.Errorf("StartScope with TasksMax 0: %v; want ErrInvalidLimits", err)
	}
	if err := m.Freeze(ctx, "nginx"); !errors.Is(err, units.ErrInvalidName) {
		t.Errorf("Freeze(nginx): %v; want ErrInvalidName", err)
	}
	if err := m.SetSliceLimits(ctx, "x.scope", units.Limits{TasksMax: new(uint64(5))}); !errors.Is(err, units.ErrInvalidName) {
		t.Errorf("SetSliceLimits of a scope: %v; want ErrInvalidName", err)
	}
	if _, err := m.List(ctx, "[bad"); err == nil {
		t.Error("List of a bad pattern: no error")
	}
	if got := names(t, m); len(got) != 0 {
		t.Fatalf("units after refused calls: %v", got)
	}
}

// A scope's slice, and the slices above it, are loaded while it holds
// the scope; a slice given limits stays.
func TestSlices(t *testing.T) {
	m := unitsfake.New()
	name := "sandbox-a.scope"
	s := scope(name, 20)
	s.Slice = units.ScopeSlice(1000, name)
	check(t, m.StartScope(ctx, s))
	check(t, m.SetUsage(name, units.Usage{Memory: units.Amount{Value: 7, Known: true}, Tasks: units.Amount{Value: 3, Known: true}}))
	got := names(t, m, units.OwnerSlices)
	want := []string{s.Slice + ":active/active", "sandboxd-u1000.slice:active/active"}
	if !slices.Equal(got, want) {
		t.Fatalf("List(%s) = %v; want %v", units.OwnerSlices, got, want)
	}
	su, err := m.SliceUsage(ctx, units.SliceRoot)
	check(t, err)
	if !su.Loaded || su.Memory.Value != 7 || su.Tasks.Value != 3 {
		t.Fatalf("SliceUsage(%s) = %+v", units.SliceRoot, su)
	}

	check(t, m.SetSliceLimits(ctx, units.OwnerSlice(1000), units.Limits{TasksMax: new(uint64(100))}))
	check(t, m.SetSliceLimits(ctx, units.OwnerSlice(1000), units.Limits{MemoryMax: new(uint64(1 << 30))}))
	check(t, m.SetSliceLimits(ctx, units.SliceRoot, units.Limits{MemoryMax: new(uint64(1<<64 - 1))}))
	u, _ := m.Unit(units.OwnerSlice(1000))
	if u.Limits.TasksMax == nil || *u.Limits.TasksMax != 100 || *u.Limits.MemoryMax != 1<<30 {
		t.Fatalf("the owner's slice's limits: %v", u.Limits)
	}
	if su, _ := m.SliceUsage(ctx, units.SliceRoot); su.Limits.MemoryMax != nil {
		t.Fatalf("infinity read back as %d; want none", *su.Limits.MemoryMax)
	}

	check(t, m.Stop(ctx, name))
	got = names(t, m, "sandboxd*.slice")
	want = []string{"sandboxd-u1000.slice:active/active", "sandboxd.slice:active/active"}
	if !slices.Equal(got, want) {
		t.Fatalf("slices once the scope stopped: %v; want %v (those given limits)", got, want)
	}
	if su, err := m.SliceUsage(ctx, s.Slice); err != nil || su.Loaded {
		t.Fatalf("SliceUsage of an unloaded slice: %+v, %v", su, err)
	}
}

func TestMountsAndServices(t *testing.T) {
	m := unitsfake.New()
	name, err := m.BindMount(ctx, "/pool/root/adopted-x", "/srv/x")
	check(t, err)
	if name != units.MountUnitName("/srv/x") {
		t.Fatalf("BindMount's unit: %s", name)
	}
	if u, ok := m.Unit(name); !ok || u.What != "/pool/root/adopted-x" || u.Where != "/srv/x" || u.ActiveState != "active" {
		t.Fatalf("the mount: %+v", u)
	}
	if _, err := m.PoolMount(ctx, "/var/lib/sandboxd/pool.img", "/var/lib/sandboxd/pool"); err != nil {
		t.Fatal(err)
	}
	if _, err := m.BindMount(ctx, "relative", "/srv/y"); err == nil {
		t.Fatal("BindMount of a relative path: no error")
	}
	check(t, m.RemoveMount(ctx, "/srv/x"))
	check(t, m.RemoveMount(ctx, "/srv/x"))
	if _, ok := m.Unit(name); ok {
		t.Fatal("a removed mount is loaded")
	}

	m.AddService("nginx.service", "active", "A=1")
	check(t, m.StopService(ctx, "nginx.service"))
	if u, _ := m.Unit("nginx.service"); u.ActiveState != "inactive" {
		t.Fatalf("a stopped service: %+v", u)
	}
	check(t, m.StartService(ctx, "nginx.service"))
	if err := m.StartService(ctx, "nope.service"); !errors.Is(err, units.ErrNotFound) {
		t.Fatalf("starting a service not there: %v; want ErrNotFound", err)
	}
	if env, err := m.ServiceEnvironment(ctx, "nginx.service"); err != nil || !slices.Equal(env, []string{"A=1"}) {
		t.Fatalf("ServiceEnvironment = %q, %v", env, err)
	}

	var calls []string
	for _, c := range m.Calls() {
		if c.Method != "Unit" {
			calls = append(calls, c.Method+" "+c.Name)
		}
	}
	want := []string{"BindMount " + name, "PoolMount " + units.MountUnitName("/var/lib/sandboxd/pool"),
		"BindMount " + units.MountUnitName("/srv/y"), "RemoveMount " + name, "RemoveMount " + name,
		"StopService nginx.service", "StartService nginx.service", "StartService nope.service", "ServiceEnvironment nginx.service"}
	if !slices.Equal(calls, want) {
		t.Fatalf("Calls:\n got %q\nwant %q", calls, want)
	}
}

func TestUnitOfPID(t *testing.T) {
	m := unitsfake.New()
	s := scope("sandbox-a.scope", 30, 31)
	s.Slice, s.Delegate = units.ScopeSlice(1000, s.Name), true
	check(t, m.StartScope(ctx, s))
	u, err := m.UnitOfPID(ctx, 31)
	check(t, err)
	want := units.ProcessUnit{Name: s.Name, ActiveState: "active", Delegate: true, Slice: s.Slice,
		ControlGroup: "/sandboxd.slice/sandboxd-u1000.slice/" + s.Slice + "/" + s.Name}
	if !reflect.DeepEqual(u, want) {
		t.Fatalf("UnitOfPID(31) = %+v; want %+v", u, want)
	}
	nginx := units.ProcessUnit{Name: "nginx.service", ActiveState: "active", ControlGroup: "/system.slice/nginx.service", Slice: "system.slice"}
	m.SetPIDUnit(31, nginx)
	if u, _ := m.UnitOfPID(ctx, 31); u != nginx {
		t.Fatalf("UnitOfPID after SetPIDUnit: %+v", u)
	}
	if _, err := m.UnitOfPID(ctx, 99); err == nil || errors.Is(err, units.ErrNotFound) {
		t.Fatalf("a pid of no unit: %v; want systemd's NoUnitForPID, no sentinel", err)
	}
	if _, err := m.UnitOfPID(ctx, 0); err == nil {
		t.Fatal("pid 0: no error")
	}
}

func TestInjectedFailures(t *testing.T) {
	m := unitsfake.New()
	job := &units.JobError{Op: "starting scope", Unit: "sandbox-a.scope", Result: "failed"}
	m.Fail("StartScope", "sandbox-a.scope", job)
	var je *units.JobError
	if err := m.StartScope(ctx, scope("sandbox-a.scope", 1)); !errors.As(err, &je) || je.Result != "failed" {
		t.Fatalf("StartScope with a failure set: %v", err)
	}
	if _, ok := m.Unit("sandbox-a.scope"); ok {
		t.Fatal("a failed start loaded the scope")
	}
	check(t, m.StartScope(ctx, scope("sandbox-b.scope", 2)))
	m.Fail("StartScope", "sandbox-a.scope", nil)
	check(t, m.StartScope(ctx, scope("sandbox-a.scope", 1)))

	m.Fail("Stop", "", units.ErrNotFound)
	if err := m.Stop(ctx, "sandbox-b.scope"); !errors.Is(err, units.ErrNotFound) {
		t.Fatalf("Stop with a failure set for any unit: %v", err)
	}
	m.Fail("Stop", "", nil)

	held := make(chan struct{})
	m.SetHook(func(method, name string) error {
		if method == "Freeze" {
			<-held
		}
		return nil
	})
	done := make(chan error)
	go func() { done <- m.Freeze(ctx, "sandbox-a.scope") }()
	check(t, m.Thaw(ctx, "sandbox-b.scope")) // not held behind the Freeze
	close(held)
	check(t, <-done)
	m.SetHook(nil)

	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if err := m.Stop(canceled, "sandbox-a.scope"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Stop with a canceled context: %v", err)
	}
	if _, ok := m.Unit("sandbox-a.scope"); !ok {
		t.Fatal("a canceled Stop stopped the scope")
	}
}

func TestConcurrentUse(t *testing.T) {
	m := unitsfake.New()
	var wg sync.WaitGroup
	for i := range 32 {
		wg.Go(func() {
			name := fmt.Sprintf("sandbox-%d.scope", i)
			s := scope(name, 100+i)
			s.Slice = units.ScopeSlice(uint32(i%3), name)
			if err := m.StartScope(ctx, s); err != nil {
				t.Error(err)
			}
			_, _ = m.List(ctx, "sandbox-*.scope")
			_, _ = m.SliceUsage(ctx, units.OwnerSlice(uint32(i%3)))
			if err := m.Freeze(ctx, name); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if got := names(t, m, "sandbox-*.scope"); len(got) != 32 {
		t.Fatalf("%d scopes after 32 starts", len(got))
	}
}
