package units_test

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/units"
)

// hogAndStay starts a scope named name with a 64 MiB hog (not yet told to
// allocate) and a process that stays after the hog ended, so that the
// scope, and its cgroup, are there still; both come back.
func hogAndStay(t *testing.T, m *units.Manager, name string, limits units.Limits) (hog, stay *proc) {
	t.Helper()
	hog = start(t, "helper", "hog:64")
	stay = start(t, "cat")
	startScope(t, m, units.Scope{Name: name, PIDs: []int{hog.pid(), stay.pid()}, Limits: limits})
	return hog, stay
}

func TestMemoryPeakOutlastsTheMemory(t *testing.T) {
	t.Parallel()
	m := connect(t)
	const name = "units-test-peak.scope"
	hog, stay := hogAndStay(t, m, name, units.Limits{})

	// What the two used before they came into the scope stays with the
	// cgroup they came from.
	before, err := units.MemoryPeak(stay.pid())
	if err != nil {
		t.Fatal(err)
	}
	if before >= 32<<20 {
		t.Errorf("MemoryPeak = %d MiB before the hog allocated anything; want far below its 64 MiB", before>>20)
	}

	hog.say(t, "go")
	hog.expect(t, "allocated 64 MiB")
	hog.stdin.Close()
	if err := hog.wait(t, 30*time.Second); err != nil {
		t.Fatalf("the hog ended with %v; want exit 0", err)
	}

	peak, err := units.MemoryPeak(stay.pid())
	if err != nil {
		t.Fatal(err)
	}
	if peak < 64<<20 || peak > 256<<20 {
		t.Errorf("MemoryPeak = %d MiB after a process touched 64 MiB; want 64 to 256 MiB", peak>>20)
	}
	// The hog is gone, and its memory with it; the peak stays.
	u, err := m.Usage(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	if u.Memory.Known && u.Memory.Value >= 32<<20 {
		t.Errorf("Memory = %d MiB once the hog ended; want its 64 MiB freed", u.Memory.Value>>20)
	}
	t.Logf("peak %d MiB; before the hog %d KiB, after it %v bytes", peak>>20, before>>10, u.Memory)
}

func TestOOMKillsCountsTheMemoryLimitsKills(t *testing.T) {
	t.Parallel()
	m := connect(t)
	hog, stay := hogAndStay(t, m, "units-test-oom-kills.scope", units.Limits{MemoryMax: new(uint64(32 << 20))})

	if n, err := units.OOMKills(stay.pid()); err != nil || n != 0 {
		t.Fatalf("OOMKills = %d, %v before anything ran; want 0", n, err)
	}
	hog.say(t, "go")
	hog.stdin.Close()
	if err := hog.wait(t, 60*time.Second); !killedBy(err, syscall.SIGKILL) {
		t.Fatalf("64 MiB under MemoryMax=32M ended with %v; want SIGKILL from the OOM killer", err)
	}
	if n, err := units.OOMKills(stay.pid()); err != nil || n != 1 {
		t.Errorf("OOMKills = %d, %v after the OOM killer killed the hog; want 1", n, err)
	}
	// The hog came up to the limit, and no further than the few pages
	// the kernel may charge past memory.max while the OOM killer acts
	// (forced charges; seen here: 4 KiB over).
	peak, err := units.MemoryPeak(stay.pid())
	if err != nil {
		t.Fatal(err)
	}
	const slack = 256 << 10 // one charge batch of 64 pages
	if peak < 16<<20 || peak > 32<<20+slack {
		t.Errorf("MemoryPeak = %d bytes after an OOM kill under MemoryMax=32M; want 16 MiB to 32 MiB + 256 KiB", peak)
	}
	t.Logf("peak %d KiB under MemoryMax=32M", peak>>10)
}
