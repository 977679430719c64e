package units_test

import (
	"context"
	"testing"

	"github.com/sandboxd/sandboxd/units"
)

func TestUsageReadsMemoryCPUAndTasks(t *testing.T) {
	t.Parallel()
	m := connect(t)
	const name = "units-test-usage.scope"
	p := start(t, "helper", "hog:64")
	startScope(t, m, units.Scope{Name: name, PIDs: []int{p.pid()}, Limits: units.Limits{MemoryMax: new(uint64(256 << 20))}})
	p.say(t, "go")
	p.expect(t, "allocated 64 MiB")

	u, err := m.Usage(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	if u.ActiveState != "active" || u.SubState != "running" {
		t.Errorf("state %s/%s; want active/running", u.ActiveState, u.SubState)
	}
	if !u.Memory.Known || u.Memory.Value < 64<<20 || u.Memory.Value > 256<<20 {
		t.Errorf("Memory = %v after touching 64 MiB under MemoryMax=256M; want 64 to 256 MiB", u.Memory)
	}
	// Touching 64 MiB page by page takes CPU time, if only milliseconds.
	if !u.CPU.Known || u.CPU.Value == 0 {
		t.Errorf("CPU = %v ns after touching 64 MiB; want some", u.CPU)
	}
	// A Go program runs several threads, and each is a task.
	if !u.Tasks.Known || u.Tasks.Value < 1 {
		t.Errorf("Tasks = %v for a running Go program; want at least 1", u.Tasks)
	}
	if u.Limits.MemoryMax == nil || *u.Limits.MemoryMax != 256<<20 {
		t.Errorf("Limits = %v; want MemoryMax=%d", u.Limits, 256<<20)
	}
	// Not set, so systemd's default is in force: no limit.
	if u.Limits.CPUQuota != nil || u.Limits.RuntimeMax != nil {
		t.Errorf("Limits = %v; want no CPU quota and no runtime limit", u.Limits)
	}
}
