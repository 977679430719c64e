package units_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/units"
)

// counter reads the number a counter helper last wrote (0 before any).
func counter(t *testing.T, file string) int {
	t.Helper()
	data, err := os.ReadFile(file)
	if os.IsNotExist(err) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(string(data))
	if err != nil {
		t.Fatalf("counter file %s holds %q", file, data)
	}
	return n
}

// processState is the state letter of pid in /proc (R, S, T, ...).
func processState(t *testing.T, pid int) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		t.Fatal(err)
	}
	// The command name, in parentheses, may hold blanks: the state
	// follows the last ")".
	fields := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:]))
	return fields[0]
}

func TestFreezeStopsTheScopeAndThawResumesIt(t *testing.T) {
	t.Parallel()
	m := connect(t)
	ctx := context.Background()
	caps := m.Capabilities()
	if caps.Layout != units.Unified && caps.Freeze != units.FreezeSignals {
		t.Fatalf("on a %s cgroup layout Capabilities.Freeze is %q; systemd cannot freeze there", caps.Layout, caps.Freeze)
	}

	dir := t.TempDir()
	frozen, control := filepath.Join(dir, "frozen"), filepath.Join(dir, "control")
	p := start(t, "helper", "counter:"+frozen)
	start(t, "helper", "counter:"+control)
	const name = "units-test-freeze.scope"
	startScope(t, m, units.Scope{Name: name, PIDs: []int{p.pid()}})
	waitFor(t, "the counter to count", func() (bool, error) { return counter(t, frozen) > 10, nil })

	if err := m.Freeze(ctx, name); err != nil {
		t.Fatal(err)
	}
	if caps.Freeze == units.FreezeSignals {
		// Freeze returns once the process is stopped, not once SIGSTOP is
		// merely pending.
		if st := processState(t, p.pid()); st != "T" {
			t.Fatalf("after Freeze the counter is in state %s; want T (stopped)", st)
		}
	}
	// The control counter, outside the scope, measures time passing: while
	// it counts 100, the frozen one must not move. One write may have
	// been under way when the freeze came: start from after the first 50.
	after := func(n int) {
		from := counter(t, control)
		waitFor(t, "the control counter to count on", func() (bool, error) { return counter(t, control) >= from+n, nil })
	}
	after(50)
	stopped := counter(t, frozen)
	after(100)
	if now := counter(t, frozen); now != stopped {
		t.Fatalf("the frozen counter went from %d to %d while the control counted 100", stopped, now)
	}
	if u, err := m.Usage(ctx, name); err != nil || u.ActiveState != "active" {
		t.Fatalf("a frozen scope: %+v, %v; want it active", u, err)
	}

	if err := m.Thaw(ctx, name); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the thawed counter to count on", func() (bool, error) { return counter(t, frozen) > stopped+10, nil })

	// A frozen scope can still be stopped: systemd follows SIGTERM with
	// SIGCONT.
	if err := m.Freeze(ctx, name); err != nil {
		t.Fatal(err)
	}
	if err := m.Stop(ctx, name); err != nil {
		t.Fatal(err)
	}
	if err := p.wait(t, 10*time.Second); !killedBy(err, syscall.SIGTERM) {
		t.Fatalf("the frozen counter ended with %v after Stop; want SIGTERM", err)
	}
}
