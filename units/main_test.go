package units_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/tests/testbed"
	"github.com/sandboxd/sandboxd/units"
)

// The test binary is also its own helper process, chosen by this variable.
const helperEnv = "UNITS_TEST_HELPER"

func TestMain(m *testing.M) {
	if h := os.Getenv(helperEnv); h != "" {
		os.Exit(helper(h))
	}
	testbed.Main(m)
}

// helper runs one of the helper processes:
//
//	hog:N      waits for a line on stdin, allocates and touches N MiB,
//	           says so, then holds it until stdin closes
//	counter:F  counts up forever, writing each number to file F
func helper(h string) int {
	mode, arg, _ := strings.Cut(h, ":")
	switch mode {
	case "hog":
		n, err := strconv.Atoi(arg)
		if err != nil {
			fmt.Fprintln(os.Stderr, "hog:", err)
			return 2
		}
		return testbed.Hog(n)
	case "counter":
		// Written by rename, so that a reader never sees half a number.
		tmp := arg + ".tmp"
		for i := 1; ; i++ {
			if err := os.WriteFile(tmp, []byte(strconv.Itoa(i)), 0o644); err != nil {
				fmt.Fprintln(os.Stderr, "counter:", err)
				return 2
			}
			if err := os.Rename(tmp, arg); err != nil {
				fmt.Fprintln(os.Stderr, "counter:", err)
				return 2
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	fmt.Fprintln(os.Stderr, "unknown helper", h)
	return 2
}

// connect opens a Manager for the test.
func connect(t *testing.T) *units.Manager {
	t.Helper()
	testbed.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m, err := units.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m
}

// proc is a process the test started, with its output as lines.
type proc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
	// waited is closed when the process ended; err is then its exit.
	waited chan struct{}
	err    error
}

// start starts argv (or, with argv[0] == "helper", this binary as the
// helper named argv[1]). It is killed, by its pid, when the test ends.
func start(t *testing.T, argv ...string) *proc {
	t.Helper()
	var cmd *exec.Cmd
	if argv[0] == "helper" {
		exe, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		cmd = exec.Command(exe)
		cmd.Env = append(os.Environ(), helperEnv+"="+argv[1])
	} else {
		cmd = exec.Command(argv[0], argv[1:]...)
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, stdin: stdin, lines: make(chan string, 100), waited: make(chan struct{})}
	go func() {
		lines := bufio.NewScanner(out)
		for lines.Scan() {
			p.lines <- lines.Text()
		}
		close(p.lines)
		p.err = cmd.Wait()
		close(p.waited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.waited
	})
	return p
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// say writes a line to the process's stdin.
func (p *proc) say(t *testing.T, line string) {
	t.Helper()
	if _, err := io.WriteString(p.stdin, line+"\n"); err != nil {
		t.Fatal(err)
	}
}

// expect waits for a line of output that starts with prefix and returns it.
func (p *proc) expect(t *testing.T, prefix string) string {
	t.Helper()
	deadline := time.After(30 * time.Second)
	var seen []string
	for {
		select {
		case line, ok := <-p.lines:
			if !ok {
				<-p.waited
				t.Fatalf("process %d ended (%v) without saying %q; it said %q", p.pid(), p.err, prefix, seen)
			}
			if strings.HasPrefix(line, prefix) {
				return line
			}
			seen = append(seen, line)
		case <-deadline:
			t.Fatalf("process %d did not say %q in 30s; it said %q", p.pid(), prefix, seen)
		}
	}
}

// wait waits for the process to end and returns how.
func (p *proc) wait(t *testing.T, within time.Duration) error {
	t.Helper()
	select {
	case <-p.waited:
		return p.err
	case <-time.After(within):
		t.Fatalf("process %d still runs after %v", p.pid(), within)
		return nil
	}
}

// killedBy says whether err is the exit of a process killed by sig.
func killedBy(err error, sig syscall.Signal) bool {
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		return false
	}
	ws := exit.Sys().(syscall.WaitStatus)
	return ws.Signaled() && ws.Signal() == sig
}

// startScope starts s and makes sure it is gone when the test ends.
func startScope(t *testing.T, m *units.Manager, s units.Scope) {
	t.Helper()
	if s.Description == "" {
		s.Description = "units test " + t.Name()
	}
	cleanupScope(t, m, s.Name)
	if err := m.StartScope(context.Background(), s); err != nil {
		t.Fatal(err)
	}
}

// cleanupScope stops and forgets the scope name when the test ends.
func cleanupScope(t *testing.T, m *units.Manager, name string) {
	t.Cleanup(func() {
		ctx := context.Background()
		if err := m.Stop(ctx, name); err != nil && !errors.Is(err, units.ErrNotFound) {
			t.Errorf("cleanup: %v", err)
		}
		if err := m.ResetFailed(ctx, name); err != nil && !errors.Is(err, units.ErrNotFound) {
			t.Errorf("cleanup: %v", err)
		}
	})
}

// waitFor polls cond until it holds, failing the test after 30s.
func waitFor(t *testing.T, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ok, err := cond()
		if err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s after 30s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// cgroupOf is the cgroup v2 (or name=systemd) path of pid, which names
// its unit.
func cgroupOf(t *testing.T, pid int) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cgroup"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		fields := strings.SplitN(line, ":", 3)
		if len(fields) == 3 && (fields[1] == "name=systemd" || fields[0] == "0" && fields[1] == "") {
			return fields[2]
		}
	}
	return ""
}

// systemctlShow is `systemctl show -p props name` as a map.
func systemctlShow(t *testing.T, name string, props ...string) map[string]string {
	t.Helper()
	out, err := exec.Command("systemctl", "show", "-p", strings.Join(props, ","), name).CombinedOutput()
	if err != nil {
		t.Fatalf("systemctl show %s: %v: %s", name, err, out)
	}
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		k, v, _ := strings.Cut(line, "=")
		got[k] = v
	}
	return got
}
