package integration

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/sandboxd/sandboxd/tests/testbed"
)

// TestFaultDeadInitIsAnnounced kills a sandbox's init with SIGKILL: the
// daemon, which watches each init by its pidfd, announces the sandbox
// stopped (StateChanged) with no call of anyone's asking, and its status
// says so. An init found again after the daemon's restart (adopted, not
// the daemon's child) is watched too.
func TestFaultDeadInitIsAnnounced(t *testing.T) {
	install(t)
	launched := sandbox(t)
	adopted := sandbox(t)
	heard := listenStates(t)
	killInit(t, launched)
	heard(launched, "stopped")
	if st := strings.TrimSpace(ok(t, "status", "--quiet", launched)); st != "stopped" {
		t.Errorf("status of a sandbox whose init was killed, once announced: %q; want stopped", st)
	}

	old := mainPID(t)
	testbed.MustRun(t, "systemctl", "restart", "sandboxd.service")
	waitActive(t, old)
	heard = listenStates(t)
	killInit(t, adopted)
	heard(adopted, "stopped")
	if st := strings.TrimSpace(ok(t, "status", "--quiet", adopted)); st != "stopped" {
		t.Errorf("status of an adopted sandbox whose init was killed, once announced: %q; want stopped", st)
	}
	alive(t, launched, "the sandbox the restart started again")
}

// killInit kills every process of sandbox id's scope (its init alone).
func killInit(t *testing.T, id string) {
	t.Helper()
	pids := scopePIDs(t, "sandbox-"+id+".scope")
	if len(pids) == 0 {
		t.Fatalf("sandbox %s's scope has no processes", id)
	}
	for _, pid := range pids {
		testbed.MustRun(t, "kill", "-9", strconv.Itoa(pid))
	}
}

// listenStates listens to the daemon's StateChanged signals as root (the
// sandboxes' owner); the function it returns waits, up to 10 s, for one
// that says sandbox id is in state st.
func listenStates(t *testing.T) func(id, st string) {
	t.Helper()
	conn, err := dbus.ConnectSystemBus()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if err := conn.AddMatchSignal(dbus.WithMatchSender("org.sandboxd1"), dbus.WithMatchMember("StateChanged")); err != nil {
		t.Fatal(err)
	}
	signals := make(chan *dbus.Signal, 64)
	conn.Signal(signals)
	// The daemon announces to the connections that called it.
	if err := conn.Object("org.sandboxd1", "/org/sandboxd1").Call("org.sandboxd1.Manager.ListSandboxes", 0).Err; err != nil {
		t.Fatal(err)
	}
	return func(id, st string) {
		t.Helper()
		var got []string
		timeout := time.After(10 * time.Second)
		for {
			select {
			case sig := <-signals:
				var sid, sst string
				if dbus.Store(sig.Body, &sid, &sst) == nil {
					if sid == id && sst == st {
						return
					}
					got = append(got, sid+" "+sst)
				}
			case <-timeout:
				t.Fatalf("no StateChanged %s %s within 10s; heard %q", id, st, got)
			}
		}
	}
}
