package integration

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/sandboxd1"
	"github.com/sandboxd/sandboxd/tests/testbed"
)

// Background processes (issue 21): a command started with run --detach
// runs on without its caller, through a restart of the daemon; ps lists
// it, logs prints what it wrote, kill ends it.

// processes lists sandbox id's background processes with ps --json.
func processes(t *testing.T, id string) map[string]psEntry {
	t.Helper()
	var ps []psEntry
	if err := json.Unmarshal([]byte(ok(t, "--json", "ps", id)), &ps); err != nil {
		t.Fatal(err)
	}
	out := map[string]psEntry{}
	for _, p := range ps {
		out[p.ID] = p
	}
	return out
}

// psEntry is a process as `sandboxctl --json ps` gives it (its times
// RFC 3339; a running one's end null).
type psEntry struct {
	ID      string     `json:"id"`
	Argv    []string   `json:"argv"`
	PID     uint32     `json:"pid"`
	Started time.Time  `json:"started"`
	Ended   *time.Time `json:"ended"`
	How     string     `json:"how"`
	Status  int32      `json:"status"`
	Signal  int32      `json:"signal"`
}

// eventually retries cond every 50 ms for up to 10 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("after 10s: %s", what)
}

func TestProcessesRunOnAndKeepTheirLogs(t *testing.T) {
	install(t)
	id := sandbox(t)
	// A web server in the background, reached from a later command.
	web := strings.TrimSpace(ok(t, "run", "--detach", id, "--", "python3", "-m", "http.server", "8000", "--bind", "127.0.0.1"))
	chat := strings.TrimSpace(ok(t, "run", "--detach", id, "--", "sh", "-c", "echo hello out; echo hello err >&2; exec sleep 600"))
	if web == "" || chat == "" || web == chat {
		t.Fatalf("run --detach printed %q and %q", web, chat)
	}
	get := "import urllib.request as u; print(u.urlopen('http://127.0.0.1:8000/').status)"
	eventually(t, "the server answers inside the sandbox", func() bool {
		out, _, code := ctl(t, "", "exec", id, "--", "python3", "-c", get)
		return code == 0 && out == "200\n"
	})
	eventually(t, "the request in the server's log", func() bool {
		return strings.Contains(ok(t, "logs", id, web), `"GET / HTTP/1.1" 200`)
	})
	if out := ok(t, "logs", id, chat); out != "hello out\nhello err\n" {
		t.Errorf("logs of the chatty process: %q", out)
	}
	ps := processes(t, id)
	if p := ps[web]; p.Ended != nil || p.PID == 0 || strings.Join(p.Argv, " ") != "python3 -m http.server 8000 --bind 127.0.0.1" {
		t.Errorf("ps: the server: %+v", p)
	}

	// The daemon restarts; the processes and their logs stay.
	before := mainPID(t)
	testbed.MustRun(t, "systemctl", "restart", "sandboxd.service")
	if mainPID(t) == before {
		t.Fatal("sandboxd did not restart")
	}
	if p := processes(t, id)[web]; p.Ended != nil {
		t.Fatalf("the server after a restart of the daemon: %+v", p)
	}
	if out, _, code := ctl(t, "", "exec", id, "--", "python3", "-c", get); code != 0 || out != "200\n" {
		t.Errorf("the server after a restart of the daemon: exit %d, %q", code, out)
	}
	eventually(t, "two requests in the server's log after the restart", func() bool {
		return strings.Count(ok(t, "logs", id, web), `"GET / HTTP/1.1" 200`) == 2
	})

	// kill ends it, and says how; its log stays, and ends.
	ok(t, "kill", id, web)
	eventually(t, "the server ended by SIGTERM", func() bool {
		p := processes(t, id)[web]
		return p.Ended != nil && p.How == "signaled" && p.Signal == 15
	})
	if out := ok(t, "ps", id); !strings.Contains(out, "killed by signal 15") || !strings.Contains(out, "running") {
		t.Errorf("ps after kill: %q", out)
	}
	if out := ok(t, "logs", "--follow", id, web); strings.Count(out, `"GET / HTTP/1.1" 200`) != 2 {
		t.Errorf("logs --follow of an ended process: %q", out)
	}
	// The other one is killed by name.
	ok(t, "kill", id, chat, "KILL")
	eventually(t, "the sleeper killed", func() bool { return processes(t, id)[chat].Signal == 9 })
}

func TestProcessesBadInput(t *testing.T) {
	install(t)
	id := sandbox(t)
	fails(t, 2, `give --detach`, "run", id, "--", "true")
	fails(t, 1, `no such background process`, "logs", id, "nosuch")
	fails(t, 1, `no such background process`, "kill", id, "nosuch")
	fails(t, 2, `signal "NOPE"`, "kill", id, "x", "NOPE")
	fails(t, 127, `not found|no such file`, "run", "--detach", id, "--", "/no/such/program")
	p := strings.TrimSpace(ok(t, "run", "--detach", id, "--", "echo", "short"))
	eventually(t, "the short process ended", func() bool { return processes(t, id)[p].Ended != nil })
	// An offset past the end of the log is refused by name.
	obj := string(sandboxd1.SandboxPath(id))
	out, err := exec.Command("busctl", "call", sandboxd1.BusName, obj, sandboxd1.SandboxInterface, "ReadLog", "stu", p, "1000000", "100").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "past the end") {
		t.Errorf("ReadLog past the end: %v, %s", err, out)
	}
	// From where it ends: nothing, and ended.
	out, err = exec.Command("busctl", "call", sandboxd1.BusName, obj, sandboxd1.SandboxInterface, "ReadLog", "stu", p, "6", "100").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "aytb 0 6 true" {
		t.Errorf("ReadLog at the end of an ended process's log: %v, %q", err, out)
	}
	// A frozen sandbox starts nothing.
	ok(t, "freeze", id)
	fails(t, 5, `it is frozen`, "run", "--detach", id, "--", "true")
	ok(t, "thaw", id)
	// Another user may not see them.
	groupMember(t, "procs-other")
	if _, errOut, code := ctlAs(t, "procs-other", "ps", id); code == 0 {
		t.Errorf("another user listed the sandbox's processes: %q", errOut)
	}
}

func TestProcessLogsRotate(t *testing.T) {
	install(t)
	id := sandbox(t)
	// 20 MiB of numbered lines: more than the two files of 8 MiB kept.
	p := strings.TrimSpace(ok(t, "run", "--detach", id, "--", "python3", "-c",
		"import sys\nfor i in range(400000): sys.stdout.write('%051d\\n' % i)"))
	eventually(t, "the writer ended", func() bool { return processes(t, id)[p].Ended != nil })
	out := ok(t, "logs", id, p)
	if len(out) > 16<<20 || len(out) < 8<<20 {
		t.Errorf("a 20 MiB log keeps %d bytes; want between 8 and 16 MiB", len(out))
	}
	if !strings.HasSuffix(out, fmt.Sprintf("%051d\n", 399999)) {
		t.Errorf("the log does not end with the last line written")
	}
	if strings.Contains(out, fmt.Sprintf("%051d\n", 0)) {
		t.Errorf("the first line is still there after a rotation")
	}
}

// A session keeps its variables between inputs, in Python, node and sh,
// and each input's output and status come back apart.
func TestSessionsKeepTheirVariables(t *testing.T) {
	install(t)
	id := sandbox(t)
	out, errOut, code := ctl(t, "x = 41\nprint(x + 1)\ndef twice(v):\n    return 2 * v\ntwice(x)\nimport os; os.system('echo from a child')\n", "repl", id, "python3")
	if code != 0 || out != "42\n82\nfrom a child\n" {
		t.Errorf("a python3 session: exit %d, %q, %q", code, out, errOut)
	}
	// node: a let and a function stay, a promise is awaited, a server an
	// input started answers the next input, process.exit ends only its
	// input.
	out, errOut, code = ctl(t, "let x = 41\nfunction twice(v) {\n  return 2 * v\n}\ntwice(x)\n"+
		"const srv = require('http').createServer((q, r) => r.end('pong')).listen(8099)\n"+
		"new Promise(r => require('http').get('http://127.0.0.1:8099', s => { let d = ''; s.on('data', c => d += c); s.on('end', () => r(d)) }))\n"+
		"process.exit(3)\nconsole.log(x + 1)\n", "repl", id, "node")
	if code != 0 || !strings.HasPrefix(out, "82\n") || !strings.Contains(out, "'pong'\n") || !strings.HasSuffix(out, "42\n") {
		t.Errorf("a node session: exit %d, %q, %q", code, out, errOut)
	}
	out, _, code = ctl(t, "n=5\necho $((n * 2))\nfalse\n", "repl", id, "sh")
	if code != 1 || out != "10\n" {
		t.Errorf("an sh session: exit %d, %q; want 10 and the last input's status 1", code, out)
	}
	// Over the bus: two calls, one variable.
	obj := string(sandboxd1.SandboxPath(id))
	bus := func(args ...string) string {
		t.Helper()
		out, err := exec.Command("busctl", append([]string{"call", sandboxd1.BusName, obj, sandboxd1.SandboxInterface}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("busctl %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out))
	}
	sess := strings.Trim(strings.TrimPrefix(bus("OpenSession", "sa{sv}", "python3", "0"), "s "), `"`)
	bus("Eval", "ss", sess, "answer = 6 * 7")
	if got := bus("Eval", "ss", sess, "print(answer)"); got != `si "42\n" 0` {
		t.Errorf("Eval of print(answer) in the same session: %s", got)
	}
	if got := bus("Eval", "ss", sess, "1/0"); !strings.Contains(got, "ZeroDivisionError") || !strings.HasSuffix(got, " 1") {
		t.Errorf("Eval of 1/0: %s; want the traceback and status 1", got)
	}
	bus("CloseSession", "s", sess)
	if out, err := exec.Command("busctl", "call", sandboxd1.BusName, obj, sandboxd1.SandboxInterface, "Eval", "ss", sess, "answer").CombinedOutput(); err == nil || !strings.Contains(string(out), "no such session") {
		t.Errorf("Eval in a closed session: %v, %s", err, out)
	}
	fails(t, 2, `language "cobol"`, "repl", id, "cobol")
}

// A background process that forks a thousand children stays within the
// sandbox's TasksMax, and its log says what the fork refused.
func TestAProcessForkingAThousandStaysWithinTasksMax(t *testing.T) {
	install(t)
	id := sandbox(t, "--tasks", "64")
	p := strings.TrimSpace(ok(t, "run", "--detach", id, "--", "sh", "-c", "i=0; while [ $i -lt 1000 ]; do sleep 60 & i=$((i+1)); done; echo forked; wait"))
	eventually(t, "the fork loop hit the limit", func() bool {
		out := ok(t, "logs", id, p)
		return strings.Contains(out, "forked") || strings.Contains(out, "fork") || strings.Contains(out, "Resource temporarily unavailable")
	})
	unit := "sandbox-" + id + ".scope"
	n := strings.TrimSpace(testbed.MustRun(t, "systemctl", "show", "-p", "TasksCurrent", "--value", unit))
	if got, want := n, "64"; len(got) == 0 || atoi(t, got) > atoi(t, want) {
		t.Errorf("%s holds %s tasks; want at most %s", unit, got, want)
	}
	if out := ok(t, "exec", id, "--", "echo", "still here"); out != "still here\n" {
		t.Errorf("the sandbox after the fork loop: %q", out)
	}
	ok(t, "kill", id, p, "KILL")
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	var n int
	if _, err := fmt.Sscan(s, &n); err != nil {
		t.Fatalf("%q is not a number", s)
	}
	return n
}
