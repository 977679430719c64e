package units_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/units"
)

func TestStartScopeShowsItsLimitsAndTheKernelHasThem(t *testing.T) {
	t.Parallel()
	m := connect(t)
	p := start(t, "sleep", "300")
	const name = "units-test-limits.scope"
	limits := units.Limits{
		CPUQuota:      new(500 * time.Millisecond),
		CPUWeight:     new(uint64(200)),
		MemoryMax:     new(uint64(256 << 20)),
		MemoryHigh:    new(uint64(192 << 20)),
		MemorySwapMax: new(uint64(0)),
		TasksMax:      new(uint64(50)),
		IOWeight:      new(uint64(300)),
		RuntimeMax:    new(time.Hour),
	}
	startScope(t, m, units.Scope{Name: name, Description: "a sandbox with limits", PIDs: []int{p.pid()}, Limits: limits})

	want := map[string]string{
		"Description":        "a sandbox with limits",
		"ActiveState":        "active",
		"CPUQuotaPerSecUSec": "500ms",
		"CPUWeight":          "200",
		"MemoryMax":          "268435456",
		"MemoryHigh":         "201326592",
		"MemorySwapMax":      "0",
		"TasksMax":           "50",
		"IOWeight":           "300",
		"RuntimeMaxUSec":     "1h",
		"MemoryAccounting":   "yes",
		"CPUAccounting":      "yes",
		"TasksAccounting":    "yes",
	}
	props := make([]string, 0, len(want))
	for k := range want {
		props = append(props, k)
	}
	got := systemctlShow(t, name, append(props, "ControlGroup")...)
	for k, v := range want {
		if got[k] != v {
			t.Errorf("systemctl show %s: %s=%s; want %s", name, k, got[k], v)
		}
	}
	if cg := cgroupOf(t, p.pid()); cg != got["ControlGroup"] {
		t.Errorf("process %d is in cgroup %s; want the scope's, %s", p.pid(), cg, got["ControlGroup"])
	}

	u, err := m.Usage(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(u.Limits, limits) {
		t.Errorf("Usage.Limits = %v; want %v", u.Limits, limits)
	}

	// The kernel's own limits, where this layout keeps them.
	cg := got["ControlGroup"]
	memoryMax, pidsMax := filepath.Join("/sys/fs/cgroup", cg, "memory.max"), filepath.Join("/sys/fs/cgroup", cg, "pids.max")
	if m.Capabilities().Layout != units.Unified {
		memoryMax = filepath.Join("/sys/fs/cgroup/memory", cg, "memory.limit_in_bytes")
		pidsMax = filepath.Join("/sys/fs/cgroup/pids", cg, "pids.max")
	}
	for file, want := range map[string]string{memoryMax: "268435456", pidsMax: "50"} {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Errorf("reading the kernel's limit: %v", err)
		} else if strings.TrimSpace(string(data)) != want {
			t.Errorf("%s is %s; want %s", file, strings.TrimSpace(string(data)), want)
		}
	}
}

// runHog runs a 200 MiB allocation in a scope with the given MemoryMax.
func runHog(t *testing.T, m *units.Manager, memoryMaxMiB uint64) (allocated bool, err error) {
	p := start(t, "helper", "hog:200")
	startScope(t, m, units.Scope{
		Name:   fmt.Sprintf("units-test-hog-%d.scope", memoryMaxMiB),
		PIDs:   []int{p.pid()},
		Limits: units.Limits{MemoryMax: new(memoryMaxMiB << 20)},
	})
	p.say(t, "go")
	p.stdin.Close()
	err = p.wait(t, 60*time.Second)
	for line := range p.lines {
		allocated = allocated || strings.HasPrefix(line, "allocated")
	}
	return allocated, err
}

func TestMemoryMaxKillsAProcessOverIt(t *testing.T) {
	t.Parallel()
	m := connect(t)

	// The control: the same 200 MiB fits under 512 MiB.
	if allocated, err := runHog(t, m, 512); err != nil || !allocated {
		t.Fatalf("200 MiB under MemoryMax=512M: %v, allocated %v; want it to finish", err, allocated)
	}
	allocated, err := runHog(t, m, 64)
	if !killedBy(err, syscall.SIGKILL) {
		t.Fatalf("200 MiB under MemoryMax=64M ended with %v; want SIGKILL from the OOM killer", err)
	}
	if allocated {
		t.Fatal("200 MiB under MemoryMax=64M said it allocated: the limit did not hold")
	}
}

// forkLoop starts 30 long sleeps in the background once told to, then
// stays, so that the scope holds 31 processes.
const forkLoop = `read go
i=0
while [ $i -lt 30 ]; do
	sleep 300 >/dev/null 2>&1 &
	i=$((i+1))
done
echo started $i
read end`

func TestTasksMaxStopsAForkLoop(t *testing.T) {
	t.Parallel()
	m := connect(t)
	ctx := context.Background()
	run := func(name string, tasksMax uint64) *proc {
		p := start(t, "/bin/sh", "-c", forkLoop)
		startScope(t, m, units.Scope{Name: name, PIDs: []int{p.pid()}, Limits: units.Limits{TasksMax: new(tasksMax)}})
		p.say(t, "go")
		return p
	}

	// The control: 30 forks fit under TasksMax=100, and Usage counts
	// them with the shell.
	p := run("units-test-forks-100.scope", 100)
	p.expect(t, "started 30")
	u, err := m.Usage(ctx, "units-test-forks-100.scope")
	if err != nil {
		t.Fatal(err)
	}
	if !u.Tasks.Known || u.Tasks.Value != 31 {
		t.Fatalf("30 sleeps and their shell under TasksMax=100: Usage.Tasks = %v; want 31", u.Tasks)
	}

	p = run("units-test-forks-5.scope", 5)
	line := p.expect(t, "")
	for !strings.Contains(strings.ToLower(line), "fork") && !strings.HasPrefix(line, "started") {
		line = p.expect(t, "")
	}
	if !strings.Contains(strings.ToLower(line), "fork") {
		t.Fatalf("30 forks under TasksMax=5 said %q; want a fork failure", line)
	}
	u, err = m.Usage(ctx, "units-test-forks-5.scope")
	if err != nil {
		t.Fatal(err)
	}
	if !u.Tasks.Known || u.Tasks.Value == 0 || u.Tasks.Value > 5 {
		t.Fatalf("30 forks under TasksMax=5 left %v tasks; want 1 to 5", u.Tasks)
	}
}

func TestRuntimeMaxEndsTheScope(t *testing.T) {
	t.Parallel()
	m := connect(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const name = "units-test-runtime.scope"
	events, err := m.Watch(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	p := start(t, "sleep", "30")
	startScope(t, m, units.Scope{Name: name, PIDs: []int{p.pid()}, Limits: units.Limits{RuntimeMax: new(time.Second)}})

	// sleep 30 would end by itself after 30s, with status 0.
	if err := p.wait(t, 20*time.Second); !killedBy(err, syscall.SIGTERM) {
		t.Fatalf("sleep 30 under RuntimeMax=1s ended with %v; want SIGTERM from systemd", err)
	}
	e := nextEvent(t, events, func(e units.Event) bool { return e.ActiveState == "failed" })
	if e.Result != "timeout" {
		t.Errorf("scope under RuntimeMax=1s ended %+v; want result timeout", e)
	}
	u, err := m.Usage(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if u.ActiveState != "failed" || u.Result != "timeout" {
		t.Errorf("scope under RuntimeMax=1s is %s with result %q; want failed with timeout", u.ActiveState, u.Result)
	}
	// Failed, it keeps its name until reset.
	if err := m.ResetFailed(ctx, name); err != nil {
		t.Fatal(err)
	}
	nextEvent(t, events, func(e units.Event) bool { return e.Gone })
}

func TestStartScopeOnATakenNameIsErrExists(t *testing.T) {
	t.Parallel()
	m := connect(t)
	const name = "units-test-taken.scope"
	first, second := start(t, "sleep", "300"), start(t, "sleep", "300")
	startScope(t, m, units.Scope{Name: name, PIDs: []int{first.pid()}})
	before := cgroupOf(t, second.pid())

	err := m.StartScope(context.Background(), units.Scope{Name: name, PIDs: []int{second.pid()}})
	if !errors.Is(err, units.ErrExists) {
		t.Fatalf("starting %s twice: %v; want ErrExists", name, err)
	}
	if !strings.Contains(err.Error(), name) {
		t.Errorf("error %q does not name the unit", err)
	}
	if after := cgroupOf(t, second.pid()); after != before {
		t.Errorf("the second process moved from %s to %s", before, after)
	}
}

func TestStartScopeRefusesNonsenseBeforeAnythingStarts(t *testing.T) {
	t.Parallel()
	m := connect(t)
	ctx := context.Background()
	p := start(t, "sleep", "300")
	before := cgroupOf(t, p.pid())
	cleanupScope(t, m, "units-test-nonsense.scope") // should any start
	for _, c := range []struct {
		scope units.Scope
		want  error
		field string
	}{
		{units.Scope{Name: "units-test-nonsense.scope", PIDs: []int{p.pid()},
			Limits: units.Limits{MemoryMax: new(uint64(64 << 20)), MemoryHigh: new(uint64(128 << 20))}}, units.ErrInvalidLimits, "MemoryHigh"},
		{units.Scope{Name: "units-test-nonsense.scope", PIDs: []int{p.pid()},
			Limits: units.Limits{TasksMax: new(uint64(0))}}, units.ErrInvalidLimits, "TasksMax"},
		{units.Scope{Name: "units-test-nonsense.service", PIDs: []int{p.pid()}}, units.ErrInvalidName, ".scope"},
		{units.Scope{Name: "../units-test-nonsense.scope", PIDs: []int{p.pid()}}, units.ErrInvalidName, "/"},
		{units.Scope{Name: "units-test-nonsense.scope"}, nil, "pid"},
	} {
		err := m.StartScope(ctx, c.scope)
		if err == nil || c.want != nil && !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.field) {
			t.Errorf("StartScope(%s, %v) = %v; want %v naming %s", c.scope.Name, c.scope.Limits, err, c.want, c.field)
		}
	}
	if found, err := m.List(ctx, "units-test-nonsense.*"); err != nil || len(found) != 0 {
		t.Errorf("after refusals, units named units-test-nonsense: %v, %v; want none", found, err)
	}
	if after := cgroupOf(t, p.pid()); after != before {
		t.Errorf("the process moved from %s to %s", before, after)
	}
}

// twoSleeps starts two sleeps once told to, says so, and waits for them.
const twoSleeps = `read go
sleep 300 &
sleep 300 &
echo started
wait`

func TestStopEndsEveryProcess(t *testing.T) {
	t.Parallel()
	m := connect(t)
	ctx := context.Background()
	const name = "units-test-stop.scope"
	p := start(t, "/bin/sh", "-c", twoSleeps)
	startScope(t, m, units.Scope{Name: name, PIDs: []int{p.pid()}, StopTimeout: 10 * time.Second})
	p.say(t, "go")
	p.expect(t, "started")
	if u, err := m.Usage(ctx, name); err != nil || u.Tasks.Value != 3 {
		t.Fatalf("before stopping: %+v, %v; want 3 tasks", u, err)
	}

	if err := m.Stop(ctx, name); err != nil {
		t.Fatal(err)
	}
	if err := p.wait(t, 10*time.Second); !killedBy(err, syscall.SIGTERM) {
		t.Errorf("the shell ended with %v; want SIGTERM", err)
	}
	// A scope goes only once its cgroup is empty: the sleeps ended too.
	waitForGone(t, m, name)
	if err := m.Stop(ctx, name); !errors.Is(err, units.ErrNotFound) {
		t.Fatalf("stopping it again: %v; want ErrNotFound", err)
	}
}

func TestKillSignalsEveryProcess(t *testing.T) {
	t.Parallel()
	m := connect(t)
	ctx := context.Background()
	const name = "units-test-kill.scope"
	p := start(t, "/bin/sh", "-c", twoSleeps)
	startScope(t, m, units.Scope{Name: name, PIDs: []int{p.pid()}})
	p.say(t, "go")
	p.expect(t, "started")
	if u, err := m.Usage(ctx, name); err != nil || u.Tasks.Value != 3 {
		t.Fatalf("before the signal: %+v, %v; want 3 tasks", u, err)
	}

	if err := m.Kill(ctx, name, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := p.wait(t, 10*time.Second); !killedBy(err, syscall.SIGTERM) {
		t.Errorf("the shell ended with %v; want SIGTERM", err)
	}
	// A scope goes only once its cgroup is empty: the sleeps ended too.
	waitForGone(t, m, name)
	if err := m.Kill(ctx, name, syscall.SIGTERM); !errors.Is(err, units.ErrNotFound) {
		t.Fatalf("signalling a scope that is gone: %v; want ErrNotFound", err)
	}
}

// waitForGone waits until systemd no longer has the unit name.
func waitForGone(t *testing.T, m *units.Manager, name string) {
	t.Helper()
	waitFor(t, name+" to go", func() (bool, error) {
		_, err := m.Usage(context.Background(), name)
		if errors.Is(err, units.ErrNotFound) {
			return true, nil
		}
		return false, err
	})
}
