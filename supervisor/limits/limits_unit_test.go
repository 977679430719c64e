package limits

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/supervisor"
	"github.com/sandboxd/sandboxd/supervisor/hosttest"
	"github.com/sandboxd/sandboxd/supervisor/state"
	"github.com/sandboxd/sandboxd/units"
	"github.com/sandboxd/sandboxd/units/unitsfake"
)

// fakeHost is hosttest's Host with the policy the room reports against.
type fakeHost struct {
	*hosttest.Host
	policy supervisor.Policy
}

func (f fakeHost) Policy() supervisor.Policy { return f.policy }

func newUnit(t *testing.T, policy supervisor.Policy, cfg Config) (*Limits, *unitsfake.Manager, *hosttest.Host) {
	t.Helper()
	um := unitsfake.New()
	h := hosttest.New(t, nil, um)
	return New(fakeHost{h, policy}, cfg), um, h
}

func u64(v uint64) *uint64 { return &v }

// run starts scope name of uid's, in its bucket, using mem bytes and
// tasks tasks, as the core's scopes would.
func run(t *testing.T, um *unitsfake.Manager, uid uint32, name string, mem, tasks uint64) {
	t.Helper()
	ctx := context.Background()
	if err := um.StartScope(ctx, units.Scope{Name: name, PIDs: []int{1}, Slice: units.ScopeSlice(uid, name)}); err != nil {
		t.Fatal(err)
	}
	if err := um.SetUsage(name, units.Usage{Memory: units.Amount{Known: true, Value: mem}, Tasks: units.Amount{Known: true, Value: tasks}}); err != nil {
		t.Fatal(err)
	}
}

func record(t *testing.T, h *hosttest.Host, id string, owner uint32, memoryMax uint64, st state.State) {
	t.Helper()
	l, err := json.Marshal(units.Limits{MemoryMax: u64(memoryMax)})
	if err != nil {
		t.Fatal(err)
	}
	h.AddSandbox(t, state.Record{ID: id, Name: id, Project: "web", Owner: owner, State: st, Limits: l})
}

func TestUnitUsageIsAnOwnersAgainstItsBoundsAndAllAgainstTheirs(t *testing.T) {
	ctx := context.Background()
	policy := supervisor.Policy{MaxPerOwner: 3, MaxSandboxes: 10, MaxMemory: 8 << 30}
	lim, um, h := newUnit(t, policy, Config{
		UserLimits:  units.Limits{MemoryMax: u64(2 << 30), TasksMax: u64(500)},
		SliceLimits: units.Limits{MemoryMax: u64(6 << 30), TasksMax: u64(4000)},
	})
	record(t, h, "a1", 1000, 1<<30, state.Ready)
	record(t, h, "a2", 1000, 512<<20, state.Ready)
	record(t, h, "b1", 1001, 256<<20, state.Ready)
	record(t, h, "b2", 1001, 1<<30, state.Destroying) // on its way out: not live
	run(t, um, 1000, "sandbox-a1.scope", 100<<20, 7)
	run(t, um, 1000, "sandbox-a2.scope", 50<<20, 3)
	run(t, um, 1001, "sandbox-b1.scope", 10<<20, 2)

	u, err := lim.Usage(ctx, 1000)
	if err != nil {
		t.Fatal(err)
	}
	want := Usage{
		Memory: units.Amount{Known: true, Value: 150 << 20}, Tasks: units.Amount{Known: true, Value: 10},
		MemoryMax: 2 << 30, TasksMax: 500, Sandboxes: 2, SandboxesMax: 3,
		AllMemory: units.Amount{Known: true, Value: 160 << 20}, AllTasks: units.Amount{Known: true, Value: 12},
		AllMemoryMax: 6 << 30, AllTasksMax: 4000, AllSandboxes: 3, AllSandboxesMax: 10,
		Promised: 1<<30 + 512<<20 + 256<<20, PromisedMax: 8 << 30,
	}
	if u != want {
		t.Errorf("Usage(1000) =\n %+v\nwant\n %+v", u, want)
	}

	// A user none of whose sandboxes ran this boot holds nothing, known;
	// no bound set is 0.
	lim, um, h = newUnit(t, supervisor.Policy{}, Config{})
	record(t, h, "b1", 1001, 256<<20, state.Ready)
	run(t, um, 1001, "sandbox-b1.scope", 10<<20, 2)
	u, err = lim.Usage(ctx, 1000)
	if err != nil {
		t.Fatal(err)
	}
	want = Usage{
		Memory: units.Amount{Known: true}, Tasks: units.Amount{Known: true},
		AllMemory: units.Amount{Known: true, Value: 10 << 20}, AllTasks: units.Amount{Known: true, Value: 2},
		AllSandboxes: 1, Promised: 256 << 20,
	}
	if u != want {
		t.Errorf("Usage(1000) of a user with no slice =\n %+v\nwant\n %+v", u, want)
	}
}

func TestUnitUsageNamesWhatSystemdRefused(t *testing.T) {
	lim, um, _ := newUnit(t, supervisor.Policy{}, Config{})
	um.Fail("SliceUsage", units.OwnerSlice(7), units.ErrNotFound)
	_, err := lim.Usage(context.Background(), 7)
	if !errors.Is(err, units.ErrNotFound) || !strings.HasPrefix(err.Error(), "the usage of uid 7: ") {
		t.Errorf("Usage with systemd failing: %v; want systemd's error, naming the uid", err)
	}
}

// sliceReads counts the SliceUsage calls made of um on slice name.
func sliceReads(um *unitsfake.Manager, name string) int {
	n := 0
	for _, c := range um.Calls() {
		if c.Method == "SliceUsage" && c.Name == name {
			n++
		}
	}
	return n
}

func TestUnitUsageReadsEachSliceAtMostOnceATTL(t *testing.T) {
	ctx := context.Background()
	lim, um, _ := newUnit(t, supervisor.Policy{}, Config{})
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	// The clock moves a millisecond a reading: a reading made at the
	// same instant as the kept one is not trusted (the clock may be off).
	lim.usage.now = func() time.Time { now = now.Add(time.Millisecond); return now }
	run(t, um, 1000, "sandbox-a.scope", 1<<20, 1)
	own := units.OwnerSlice(1000)

	for range 5 {
		if _, err := lim.Usage(ctx, 1000); err != nil {
			t.Fatal(err)
		}
	}
	if n, m := sliceReads(um, own), sliceReads(um, units.SliceRoot); n != 1 || m != 1 {
		t.Fatalf("5 Usage within a TTL read the owner's slice %d times and all %d; want once each", n, m)
	}
	// What changed within the TTL is not seen: the reading is kept.
	run(t, um, 1000, "sandbox-b.scope", 1<<20, 4)
	if u, _ := lim.Usage(ctx, 1000); u.Tasks.Value != 1 {
		t.Errorf("Usage within the TTL: %d tasks; want the kept reading's 1", u.Tasks.Value)
	}

	now = now.Add(SliceUsageTTL)
	u, err := lim.Usage(ctx, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if n := sliceReads(um, own); n != 2 || u.Tasks.Value != 5 {
		t.Errorf("Usage a TTL later: %d reads of the owner's slice, %d tasks; want 2 and the new 5", n, u.Tasks.Value)
	}
	// Another user's is read apart, and the old readings leave the cache.
	now = now.Add(2 * SliceUsageTTL)
	if _, err := lim.Usage(ctx, 1001); err != nil {
		t.Fatal(err)
	}
	if _, ok := lim.usage.m[own]; ok || len(lim.usage.m) != 2 {
		t.Errorf("the cache holds %d readings (the first user's: %v); want the second's and all's only", len(lim.usage.m), ok)
	}
	// A clock gone back reads anew.
	now = now.Add(-time.Hour)
	_, _ = lim.Usage(ctx, 1001)
	if n := sliceReads(um, units.OwnerSlice(1001)); n != 2 {
		t.Errorf("Usage with the clock gone back: %d reads; want 2", n)
	}
}

func TestUnitApplyUserLimitsSetsAllSandboxesAndEachOwnersSlice(t *testing.T) {
	ctx := context.Background()
	inf := uint64(math.MaxUint64)
	lim, um, _ := newUnit(t, supervisor.Policy{}, Config{
		UserLimits:  units.Limits{TasksMax: u64(300)},
		SliceLimits: units.Limits{MemoryMax: u64(4 << 30)},
	})
	// Two owners' slices there from an earlier configuration, one of
	// them with a bound this one leaves out, and a bucket of scopes.
	if err := um.SetSliceLimits(ctx, units.OwnerSlice(1000), units.Limits{MemoryMax: u64(1 << 30)}); err != nil {
		t.Fatal(err)
	}
	run(t, um, 1001, "sandbox-b.scope", 0, 1)
	if err := lim.ApplyUserLimits(ctx); err != nil {
		t.Fatal(err)
	}
	root, _ := um.Unit(units.SliceRoot)
	if l := root.Limits; l.MemoryMax == nil || *l.MemoryMax != 4<<30 || l.TasksMax == nil || *l.TasksMax != inf {
		t.Errorf("%s limits %v; want MemoryMax 4G and TasksMax lifted (infinity)", units.SliceRoot, show(l))
	}
	for _, uid := range []uint32{1000, 1001} {
		s, ok := um.Unit(units.OwnerSlice(uid))
		if l := s.Limits; !ok || l.TasksMax == nil || *l.TasksMax != 300 || l.MemoryMax == nil || *l.MemoryMax != inf {
			t.Errorf("%s limits %v (loaded %v); want TasksMax 300 and MemoryMax lifted (infinity)", units.OwnerSlice(uid), show(l), ok)
		}
	}
	for _, c := range um.Calls() {
		if c.Method == "SetSliceLimits" && c.Name == units.ScopeSlice(1001, "sandbox-b.scope") {
			t.Errorf("ApplyUserLimits set limits on a bucket of scopes (%s): its owner's bound it", c.Name)
		}
	}
	// systemd refusing one slice leaves the others set, and says so.
	um.Fail("SetSliceLimits", units.SliceRoot, units.ErrNotFound)
	if err := lim.ApplyUserLimits(ctx); err == nil {
		t.Error("ApplyUserLimits with sandboxd.slice refused: nil; want the error")
	}
}

func show(l units.Limits) map[string]any {
	m := map[string]any{}
	if l.MemoryMax != nil {
		m["MemoryMax"] = *l.MemoryMax
	}
	if l.TasksMax != nil {
		m["TasksMax"] = *l.TasksMax
	}
	return m
}
