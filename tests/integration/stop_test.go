package integration

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/sandboxd1"
	"github.com/sandboxd/sandboxd/tests/testbed"
)

// A stopped sandbox keeps its files, its exposed port and its declared
// process, through a restart of the daemon, and runs again on start: the
// declared process (a heartbeat, and a web server behind the port) runs
// again, the one started without --restart does not.
func TestStopAndStartKeepTheSandbox(t *testing.T) {
	install(t)
	sb := sandbox(t)
	path := property(t, "/org/sandboxd1/sandbox/"+sb, "Path")
	ok(t, "exec", sb, "--", "sh", "-c", "echo kept > kept.txt")
	ok(t, "spawn", "--restart", sb, "--", "sh", "-c", "while :; do date +%s%N > beat; sleep 0.1; done")
	ok(t, "spawn", "--restart", sb, "--", "python3", "-m", "http.server", "8000", "--bind", "127.0.0.1")
	ok(t, "run", "--detach", sb, "--", "sh", "-c", "while :; do date +%s%N > other; sleep 0.1; done")
	socket := strings.TrimSpace(ok(t, "port", sb, "8000"))
	serves := func() bool { out, code := curl(t, "", socket, ""); return code == 0 && strings.Contains(out, "200 OK") }
	waitFor(t, "the declared server to answer through the port", serves)
	waitFor(t, "the heartbeat and the other process to write", func() bool {
		return fileOf(path, "beat") != "" && fileOf(path, "other") != ""
	})

	ok(t, "stop", sb)
	stopped := func(when string) {
		t.Helper()
		if st := strings.TrimSpace(ok(t, "--quiet", "status", sb)); st != sandboxd1.StateStopped {
			t.Fatalf("%s: status says %q; want stopped", when, st)
		}
		if !strings.Contains(ok(t, "list"), "stopped") {
			t.Errorf("%s: list does not say stopped:\n%s", when, ok(t, "list"))
		}
		fails(t, 5, "sandbox "+sb+": sandbox is stopped: start it with sandboxctl start "+sb, "exec", sb, "--", "true")
		fails(t, 5, "sandbox is stopped: start it", "port", sb, "8001")
		if out, _ := exec.Command("systemctl", "is-active", "sandbox-"+sb+".scope").Output(); strings.TrimSpace(string(out)) == "active" {
			t.Errorf("%s: its scope is active", when)
		}
		if got := fileOf(path, "kept.txt"); got != "kept\n" {
			t.Errorf("%s: kept.txt on the pool holds %q", when, got)
		}
	}
	stopped("stopped")
	ok(t, "stop", sb) // again: nothing to do
	beat, other := fileOf(path, "beat"), fileOf(path, "other")
	testbed.MustRun(t, "systemctl", "restart", "sandboxd.service")
	stopped("after a restart of the daemon")
	if fileOf(path, "beat") != beat || fileOf(path, "other") != other {
		t.Errorf("a process of the stopped sandbox still writes")
	}

	ok(t, "start", sb)
	ok(t, "start", sb) // again: nothing to do
	if out := ok(t, "exec", sb, "--", "cat", "kept.txt"); out != "kept\n" {
		t.Errorf("kept.txt after start: %q", out)
	}
	waitFor(t, "the declared heartbeat to beat again", func() bool { return fileOf(path, "beat") != beat })
	waitFor(t, "the declared server to answer through the port again", serves)
	var ps []struct {
		ID   string
		Argv []string
	}
	if err := json.Unmarshal([]byte(ok(t, "--json", "ps", sb)), &ps); err != nil {
		t.Fatal(err)
	}
	if len(ps) != 2 || strings.Contains(strings.Join(append(ps[0].Argv, ps[1].Argv...), " "), "other") {
		t.Errorf("processes after start: %+v; want the two declared ones alone", ps)
	}
	if got := fileOf(path, "other"); got != other {
		t.Errorf("the process spawned without --restart writes again after start")
	}
	// Ended by its caller, a declared process is no longer declared.
	for _, p := range ps {
		if strings.Contains(strings.Join(p.Argv, " "), "beat") {
			ok(t, "kill", sb, p.ID)
		}
	}
	ok(t, "stop", sb)
	ok(t, "start", sb)
	if err := json.Unmarshal([]byte(ok(t, "--json", "ps", sb)), &ps); err != nil {
		t.Fatal(err)
	}
	if len(ps) != 1 || ps[0].Argv[0] != "python3" {
		t.Errorf("processes after the heartbeat was killed, a stop and a start: %+v; want the server alone", ps)
	}
}

// With [limits] idle_freeze and idle_stop, an idle sandbox is frozen
// first, stopped later, and the next command starts it; one its caller
// stopped stays stopped.
func TestIdleSandboxesStopAndStart(t *testing.T) {
	install(t)
	reconfigure(t, "[limits]\nidle_freeze = \"1s\"\nidle_stop = \"4s\"\n")
	idle := sandbox(t)
	held := sandbox(t)
	ok(t, "stop", held)
	waitFor(t, "the idle sandbox to be frozen", func() bool {
		return strings.Contains(ok(t, "status", idle), "frozen (idle")
	})
	waitFor(t, "the idle sandbox to be stopped", func() bool {
		return strings.TrimSpace(ok(t, "--quiet", "status", idle)) == sandboxd1.StateStopped
	})
	if out := ok(t, "exec", idle, "--", "echo", "awake"); out != "awake\n" {
		t.Errorf("a command in an idle-stopped sandbox: %q", out)
	}
	if st := strings.TrimSpace(ok(t, "--quiet", "status", idle)); st == sandboxd1.StateStopped {
		t.Errorf("the sandbox is still stopped after a command")
	}
	fails(t, 5, "sandbox is stopped", "exec", held, "--", "true")
}

// fileOf is the content of file name of a sandbox's copy at path, on the
// pool ("" if none).
func fileOf(path, name string) string {
	b, _ := os.ReadFile(filepath.Join(path, name))
	return string(b)
}
