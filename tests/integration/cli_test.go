package integration

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/tests/testbed"
)

// ctlBin is sandboxctl, built beside the daemon by TestMain.
func ctlBin() string { return filepath.Join(filepath.Dir(daemonBin), "sandboxctl") }

// ctl runs sandboxctl as root, as a user would type it, and returns its
// stdout, stderr and exit status.
func ctl(t *testing.T, stdin string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(ctlBin(), args...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code := 0
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		code = exit.ExitCode()
	} else if err != nil {
		t.Fatalf("sandboxctl %s: %v", strings.Join(args, " "), err)
	}
	return out.String(), errOut.String(), code
}

// ok runs sandboxctl and fails the test unless it exits 0.
func ok(t *testing.T, args ...string) string {
	t.Helper()
	out, errOut, code := ctl(t, "", args...)
	if code != 0 {
		t.Fatalf("sandboxctl %s: exit %d: %s%s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

// fails runs sandboxctl, wants exit status code and stderr matching want.
func fails(t *testing.T, code int, want string, args ...string) {
	t.Helper()
	out, errOut, got := ctl(t, "", args...)
	if got != code || !regexp.MustCompile(want).MatchString(errOut) {
		t.Errorf("sandboxctl %s: exit %d, stderr %q (stdout %q); want exit %d and stderr matching %q",
			strings.Join(args, " "), got, errOut, out, code, want)
	}
}

func TestCLICreateListStatusDestroy(t *testing.T) {
	install(t)
	out := ok(t, "create", "--name", "tour", "--memory", "256M", "--tasks", "64", "--ttl", "1h", "web")
	m := regexp.MustCompile(`^created sandbox ([0-9a-f]{12}) \(tour\) of web\n$`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("create said %q", out)
	}
	id := m[1]
	quiet := strings.TrimSpace(ok(t, "create", "-q", "web"))
	if !regexp.MustCompile(`^[0-9a-f]{12}$`).MatchString(quiet) {
		t.Errorf("create --quiet printed %q; want only an id", quiet)
	}
	fails(t, 5, `a sandbox named "tour" exists`, "create", "--name", "tour", "web")

	list := ok(t, "list")
	if !regexp.MustCompile(`(?m)^ID\s+NAME\s+PROJECT\s+STATE\s+OWNER\s+AGE$`).MatchString(list) ||
		!regexp.MustCompile(`(?m)^`+id+`\s+tour\s+web\s+ready\s+root\s+\d+s$`).MatchString(list) {
		t.Errorf("list:\n%s", list)
	}
	var js []map[string]any
	if err := json.Unmarshal([]byte(ok(t, "list", "--json")), &js); err != nil || len(js) < 2 {
		t.Errorf("list --json: %v %v", js, err)
	}

	// 20 MiB held at once (tail keeps what has no newline), then freed:
	// status shows it as the peak.
	ok(t, "exec", "tour", "--", "sh", "-c", "head -c 20M /dev/zero | tail >/dev/null")

	// By name, and by the start of its id.
	for _, ref := range []string{"tour", id[:6]} {
		st := ok(t, "status", ref)
		t.Logf("$ sandboxctl status %s\n%s", ref, st)
		for _, want := range []string{"Sandbox:   " + id + " (tour)", "State:     ready", "Memory:    ", "of 256.0 MiB", "Tasks:     ", " of 64", "Staleness: current"} {
			if !strings.Contains(st, want) {
				t.Errorf("status %s lacks %q:\n%s", ref, want, st)
			}
		}
		// What it uses of its limit, and the most it used.
		memory := `(?m)^Memory:    (?:\d+ B|\d+\.\d [KM]iB) of 256\.0 MiB \(\d+%\), peak (\d+\.\d) MiB \(\d+%\)$`
		m := regexp.MustCompile(memory).FindStringSubmatch(st)
		if m == nil {
			t.Errorf("status %s has no line matching %s:\n%s", ref, memory, st)
		} else if peak, _ := strconv.ParseFloat(m[1], 64); peak < 16 || peak > 64 {
			t.Errorf("status %s: peak %s MiB after a command held 20 MiB; want 16 to 64 MiB:\n%s", ref, m[1], st)
		}
	}
	if st := strings.TrimSpace(ok(t, "status", "-q", "tour")); st != "ready" {
		t.Errorf("status --quiet: %q", st)
	}
	fails(t, 3, `no sandbox is called or starts with "nosuch"`, "status", "nosuch")

	ok(t, "freeze", "tour")
	if st := strings.TrimSpace(ok(t, "status", "-q", "tour")); st != "frozen" {
		t.Errorf("state after freeze: %q", st)
	}
	fails(t, 5, "frozen", "exec", "tour", "--", "true")
	ok(t, "thaw", "tour")

	if out := ok(t, "destroy", "tour", quiet); out != "destroyed sandbox "+id+"\ndestroyed sandbox "+quiet+"\n" {
		t.Errorf("destroy said %q", out)
	}
	fails(t, 3, "no sandbox", "status", id)
}

func TestCLIExecPassesStreamsAndStatus(t *testing.T) {
	install(t)
	id := strings.TrimSpace(ok(t, "create", "-q", "web"))
	defer ctl(t, "", "destroy", id)
	out, errOut, code := ctl(t, "", "exec", id, "--", "sh", "-c", "cat index.html; echo oops >&2; exit 7")
	if out != "<h1>web</h1>\n" || errOut != "oops\n" || code != 7 {
		t.Errorf("exec: stdout %q stderr %q exit %d", out, errOut, code)
	}
	if out, _, code := ctl(t, "from stdin\n", "exec", id, "cat"); out != "from stdin\n" || code != 0 {
		t.Errorf("exec with stdin: %q exit %d", out, code)
	}
	if _, errOut, code := ctl(t, "", "exec", "--timeout", "300ms", id, "--", "sleep", "10"); code != 124 || !strings.Contains(errOut, "timed out") {
		t.Errorf("exec --timeout: exit %d, %q", code, errOut)
	}
	fails(t, 127, `no-such-program: not found`, "exec", id, "--", "no-such-program")
	fails(t, 2, `what command\? \(usage: sandboxctl exec \[options\] SANDBOX -- COMMAND \[ARG...\]\)`, "exec", id)

	// Ctrl-C: the command is stopped, the sandbox stays.
	cmd := exec.Command(ctlBin(), "exec", id, "--", "sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	begin := time.Now()
	_ = cmd.Process.Signal(syscall.SIGINT) // the sandboxctl this test started
	err := cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 130 || time.Since(begin) > 5*time.Second {
		t.Errorf("exec after Ctrl-C: %v after %v; want exit 130 at once", err, time.Since(begin))
	}
	if st := strings.TrimSpace(ok(t, "status", "-q", id)); st != "ready" {
		t.Errorf("the sandbox after Ctrl-C of its command: %q", st)
	}

	// A closed stdout drops the output; the command runs and its
	// status comes back. A reader that went away stops the writer.
	for script, want := range map[string]int{
		ctlBin() + " exec " + id + " -- sh -c 'echo hi; exit 3' >&-":                                       3,
		ctlBin() + " exec " + id + " -- sh -c 'yes; exit 0' | head -c 1 >/dev/null; exit ${PIPESTATUS:-0}": 0,
	} {
		sh := exec.Command("/bin/bash", "-c", script)
		out2, _ := sh.CombinedOutput()
		if sh.ProcessState.ExitCode() != want || len(out2) != 0 {
			t.Errorf("%s: exit %d, %q; want exit %d and nothing said", script, sh.ProcessState.ExitCode(), out2, want)
		}
	}
}

func TestCLIShellIsInteractive(t *testing.T) {
	install(t)
	id := strings.TrimSpace(ok(t, "create", "-q", "web"))
	defer ctl(t, "", "destroy", id)
	master, slave := openPTY(t)
	cmd := exec.Command(ctlBin(), "shell", id)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	slave.Close()
	var screen bytes.Buffer
	done := make(chan struct{})
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := master.Read(buf)
			screen.Write(buf[:n])
			if err != nil {
				close(done)
				return
			}
		}
	}()
	time.Sleep(time.Second) // the shell's prompt
	if _, err := master.Write([]byte("echo $((6*7)) $(tty)\rexit 3\r")); err != nil {
		t.Fatal(err)
	}
	werr := make(chan error, 1)
	go func() { werr <- cmd.Wait() }()
	select {
	case err := <-werr:
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 3 {
			t.Errorf("shell exit: %v; want status 3", err)
		}
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("the shell did not end; screen: %q", screen.String())
	}
	master.Close()
	if !strings.Contains(screen.String(), "42 /dev/pts/0") {
		t.Errorf("the shell's screen lacks the answer: %q", screen.String())
	}
}

func TestCLIProjects(t *testing.T) {
	tb := install(t)
	if list := ok(t, "project", "list"); !regexp.MustCompile(`(?m)^web\s+` + regexp.QuoteMeta(tb.Btrfs.Project) + `\s+sandboxd.toml$`).MatchString(list) {
		t.Errorf("project list:\n%s", list)
	}
	other := filepath.Join(tb.Btrfs.Mount, fmt.Sprintf("cli-other-%d", os.Getpid()))
	testbed.MustRun(t, "btrfs", "subvolume", "create", other)
	defer testbed.MustRun(t, "btrfs", "subvolume", "delete", other)
	plain := t.TempDir()
	fails(t, 2, regexp.QuoteMeta(plain), "project", "add", "plain", plain)
	ok(t, "project", "add", "other", other)
	fails(t, 5, "exists", "project", "add", "other", other)
	id := strings.TrimSpace(ok(t, "create", "-q", "other"))
	fails(t, 5, "destroy them first", "project", "remove", "other")
	ok(t, "destroy", id)
	ok(t, "project", "remove", "other")
	fails(t, 3, "", "create", "other")
	fails(t, 2, "sandboxd.toml", "project", "remove", "web")
}

func TestCLIErrorsSayWhatToDo(t *testing.T) {
	install(t)
	fails(t, 2, `(?i)no.*command.*creat|did you mean "create"`, "creat", "web")
	fails(t, 2, `create takes PROJECT \(usage: sandboxctl create \[options\] PROJECT\)`, "create")
	fails(t, 2, `--memory lots`, "create", "--memory", "lots", "web")
	fails(t, 3, `see .sandboxctl project list.`, "create", "nosuchproject")

	// Not allowed: a user outside the sandboxd group.
	cmd := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", ctlBin(), "list")
	out, _ := cmd.CombinedOutput()
	if cmd.ProcessState.ExitCode() != 4 || !strings.Contains(string(out), "group sandboxd") {
		t.Errorf("list as nobody: exit %d: %s", cmd.ProcessState.ExitCode(), out)
	}

	// The daemon stopped: how to start it.
	testbed.MustRun(t, "systemctl", "stop", "sandboxd.service")
	fails(t, 6, "systemctl start sandboxd", "list")
	testbed.MustRun(t, "systemctl", "start", "sandboxd.service")
	ok(t, "list")
}

func TestCLIGarbageCollects(t *testing.T) {
	install(t)
	id := strings.TrimSpace(ok(t, "create", "-q", "web"))
	time.Sleep(10 * time.Millisecond)
	if out := ok(t, "gc", "--dry-run", "--older-than", "1ms"); !strings.Contains(out, "would destroy sandbox "+id) {
		t.Errorf("gc --dry-run: %q", out)
	}
	ok(t, "status", id)
	if out := ok(t, "gc", "--older-than", "1ms"); !strings.Contains(out, "destroyed sandbox "+id) {
		t.Errorf("gc: %q", out)
	}
	fails(t, 3, "", "status", id)
	if out := ok(t, "gc"); out != "nothing to collect\n" {
		t.Errorf("gc with nothing to do: %q", out)
	}
}

func TestCLIHelpCompletionAndManPage(t *testing.T) {
	help := ok(t, "--help")
	for _, verb := range []string{"create", "list", "status", "exec", "shell", "destroy", "gc", "project", "EXIT STATUS"} {
		if !strings.Contains(help, verb) {
			t.Errorf("--help lacks %q", verb)
		}
	}
	for _, shell := range []string{"bash", "zsh", "fish"} {
		if out := ok(t, "completion", shell); !strings.Contains(out, "sandboxctl") {
			t.Errorf("completion %s: %q", shell, out)
		}
	}
	man := ok(t, "man")
	if !strings.HasPrefix(man, ".TH SANDBOXCTL 1") || !strings.Contains(man, ".SH EXIT STATUS") || !strings.Contains(man, "project add") {
		t.Errorf("man page:\n%s", man)
	}
	if _, err := exec.LookPath("man"); err == nil {
		f := filepath.Join(t.TempDir(), "sandboxctl.1")
		if err := os.WriteFile(f, []byte(man), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("man", "-l", "--warnings", f).CombinedOutput(); err != nil || strings.Contains(string(out), "warning") {
			t.Errorf("man -l: %v: %s", err, out)
		}
	}
}

// openPTY opens a pseudo-terminal for a test's command.
func openPTY(t *testing.T) (*os.File, *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_ = unix.IoctlSetWinsize(int(s.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: 24, Col: 80})
	return m, s
}

func TestCLICheckpointRollbackDiff(t *testing.T) {
	install(t)
	id := strings.TrimSpace(ok(t, "create", "-q", "--name", "ck", "web"))
	defer ctl(t, "", "destroy", id)
	fails(t, 2, "options go before it", "exec", "ck", "--root", "--", "true")
	ok(t, "exec", "--root", "ck", "--", "sh", "-c", "echo v1 > notes.txt && echo tool > /usr/local/bin/ck-tool")
	if out := ok(t, "checkpoint", "ck", "good"); out != "checkpoint good of sandbox "+id+" taken\n" {
		t.Errorf("checkpoint said %q", out)
	}
	fails(t, 5, "exists", "checkpoint", "ck", "good")
	ok(t, "exec", "--root", "ck", "--", "sh", "-c", "echo broken > notes.txt && rm index.html /usr/local/bin/ck-tool")
	if out := ok(t, "diff", "ck"); out != "D index.html\nA notes.txt\n" {
		t.Errorf("diff:\n%s", out)
	}
	list := ok(t, "checkpoints", "ck")
	if !regexp.MustCompile(`(?m)^good\s+\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\s+files and system layer$`).MatchString(list) {
		t.Errorf("checkpoints:\n%s", list)
	}
	ok(t, "rollback", "ck", "good")
	if out := ok(t, "exec", "ck", "--", "cat", "notes.txt", "index.html", "/usr/local/bin/ck-tool"); out != "v1\n<h1>web</h1>\ntool\n" {
		t.Errorf("after rollback: %q", out)
	}
	fails(t, 3, `no such checkpoint`, "rollback", "ck", "nope")
	ok(t, "checkpoint", "--delete", "ck", "good")
	if out := ok(t, "checkpoints", "-q", "ck"); out != "" {
		t.Errorf("checkpoints after delete: %q", out)
	}
}

func TestCLIExecSaysSoWhenTheDaemonRestarts(t *testing.T) {
	install(t)
	id := strings.TrimSpace(ok(t, "create", "-q", "web"))
	defer ctl(t, "", "destroy", id)
	// A file, not a pipe, for stderr: the command goes on running (and
	// holding its stderr) after sandboxctl has given up on it.
	errFile, err := os.Create(filepath.Join(t.TempDir(), "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	defer errFile.Close()
	cmd := exec.Command(ctlBin(), "exec", id, "--", "sleep", "30")
	cmd.Stderr = errFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	testbed.MustRun(t, "systemctl", "restart", "sandboxd.service")
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		said, _ := os.ReadFile(errFile.Name())
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(string(said), "restarted while the command ran") {
			t.Errorf("exec across a daemon restart: %v, %q", err, said)
		}
	case <-time.After(15 * time.Second):
		_ = cmd.Process.Kill() // the sandboxctl this test started
		t.Fatal("sandboxctl exec still waits 15s after the daemon restarted")
	}
}
