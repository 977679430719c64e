package integration

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/tests/testbed"
)

// The host's reboot (issue 31): the testbed is killed as by a power cut and
// boots again with its pools and its root's layer kept (testbed.Reboot).
// The test binary dies with it and runs again from the test that asked
// (testbed.RebootTest, testbed.Rebooted), so each test below runs twice:
// before the reboot it makes a sandbox, after it it checks what came back.
// The first run's cleanups never run: the second one's clean up.

// rebootState is what a test hands over the reboot.
type rebootState struct {
	ID string `json:"id"`
}

// afterReboot brings the installed daemon back, as a host's boot starts an
// enabled sandboxd.service (the .deb does not enable it: D-Bus activation
// starts it at the first call; the testbed boots a minimal target, so
// this starts it): the unit file lived under /run, which the boot
// emptied, so it is written again with the rest of install. It checks the
// reboot happened: the old unit file is gone, the daemon's state is kept.
func afterReboot(t *testing.T) {
	t.Helper()
	if _, err := os.Stat("/run/systemd/system/sandboxd.service"); !os.IsNotExist(err) {
		t.Fatalf("after the reboot, /run still holds sandboxd's unit (%v): the testbed did not boot again", err)
	}
	if _, err := os.Stat("/var/lib/sandboxd/state.db"); err != nil {
		t.Fatalf("after the reboot, the daemon's state: %v; want it kept with the root's layer", err)
	}
	installed = false
	install(t)
}

// A sandbox that ran before the reboot runs again after it, with its
// files (the daemon's start reconciles: its scope is gone, it restarts it).
func TestARunningSandboxRunsAgainAfterTheHostsReboot(t *testing.T) {
	var st rebootState
	if !testbed.Rebooted(t, &st) {
		install(t)
		st.ID = strings.TrimSpace(ok(t, "create", "-q", "web"))
		t.Cleanup(func() { ctl(t, "", "destroy", st.ID) }) // if it fails before the reboot
		ok(t, "exec", st.ID, "--", "sh", "-c", "echo written before the reboot >kept.txt && sync kept.txt")
		testbed.RebootTest(t, st)
	}
	afterReboot(t)
	t.Cleanup(func() { ctl(t, "", "destroy", st.ID) })
	if state := strings.TrimSpace(ok(t, "status", "-q", st.ID)); state != "ready" {
		t.Fatalf("sandbox %s after the reboot and the daemon's start: status %q; want ready", st.ID, state)
	}
	if out := ok(t, "exec", st.ID, "--", "cat", "kept.txt"); out != "written before the reboot\n" {
		t.Fatalf("sandbox %s's kept.txt after the reboot: %q", st.ID, out)
	}
	if out := ok(t, "exec", st.ID, "--", "cat", "index.html"); out != "<h1>web</h1>\n" {
		t.Fatalf("sandbox %s's index.html after the reboot: %q", st.ID, out)
	}
}

// The case: a stopped sandbox with a declared process survives
// the reboot stopped, starts again with its files, and its declared
// process runs again. (Needs `sandboxctl stop`, `start` and `spawn
// --restart`.)
func TestAStoppedSandboxStaysStoppedThroughTheHostsReboot(t *testing.T) {
	var st rebootState
	if !testbed.Rebooted(t, &st) {
		install(t)
		st.ID = strings.TrimSpace(ok(t, "create", "-q", "web"))
		t.Cleanup(func() { ctl(t, "", "destroy", st.ID) })
		ok(t, "exec", st.ID, "--", "sh", "-c", "echo written before the reboot >kept.txt && sync kept.txt")
		ok(t, "spawn", "--restart", st.ID, "--", "sh", "-c", "echo up >>declared.log; exec sleep infinity")
		eventually(t, "the declared process runs", func() bool { return runningDeclared(t, st.ID) == 1 })
		ok(t, "stop", st.ID)
		if state := strings.TrimSpace(ok(t, "status", "-q", st.ID)); state != "stopped" {
			t.Fatalf("sandbox %s after stop: status %q; want stopped", st.ID, state)
		}
		testbed.RebootTest(t, st)
	}
	booted := time.Now()
	afterReboot(t)
	t.Cleanup(func() { ctl(t, "", "destroy", st.ID) })
	if state := strings.TrimSpace(ok(t, "status", "-q", st.ID)); state != "stopped" {
		t.Fatalf("sandbox %s, stopped before the reboot, after it and the daemon's start: status %q; want stopped", st.ID, state)
	}
	// ps of a stopped sandbox may list its processes (none running) or
	// refuse: it is stopped.
	out, errOut, code := ctl(t, "", "--json", "ps", st.ID)
	var ps []psEntry
	switch {
	case code != 0 && !strings.Contains(errOut, "stopped"):
		t.Fatalf("ps of stopped sandbox %s: exit %d: %s", st.ID, code, errOut)
	case code == 0 && json.Unmarshal([]byte(out), &ps) != nil:
		t.Fatalf("ps --json of stopped sandbox %s: %q", st.ID, out)
	}
	for _, p := range ps {
		if p.Ended == nil {
			t.Fatalf("sandbox %s is stopped and ps lists process %s (%v) as running", st.ID, p.ID, p.Argv)
		}
	}
	ok(t, "start", st.ID)
	if state := strings.TrimSpace(ok(t, "status", "-q", st.ID)); state != "ready" {
		t.Fatalf("sandbox %s after start: status %q; want ready", st.ID, state)
	}
	if out := ok(t, "exec", st.ID, "--", "cat", "kept.txt"); out != "written before the reboot\n" {
		t.Fatalf("sandbox %s's kept.txt after the reboot and start: %q", st.ID, out)
	}
	eventually(t, "the declared process runs again after start", func() bool { return runningDeclared(t, st.ID) == 1 })
	for _, p := range processes(t, st.ID) {
		if p.Ended == nil && p.Started.Before(booted) {
			t.Errorf("process %s (%v) runs with a start before the reboot (%v): want a new one", p.ID, p.Argv, p.Started)
		}
	}
	if out := ok(t, "exec", st.ID, "--", "cat", "declared.log"); out != "up\nup\n" {
		t.Errorf("the declared process's log after the reboot and start: %q; want one line from each run", out)
	}
}

// runningDeclared counts sandbox id's running processes that are the
// declared `sleep infinity`.
func runningDeclared(t *testing.T, id string) int {
	t.Helper()
	n := 0
	for _, p := range processes(t, id) {
		if p.Ended == nil && strings.Contains(strings.Join(p.Argv, " "), "exec sleep infinity") {
			n++
		}
	}
	return n
}
