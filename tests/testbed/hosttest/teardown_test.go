// Package hosttest checks, from the host, that a testbed leaves nothing
// behind however it ends: its command finishing, Ctrl-C, or the process
// that owns it being killed with SIGKILL.
package hosttest

import (
	"bufio"
	"errors"
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
)

// buildTestbed builds the testbed command into a temporary directory.
func buildTestbed(t *testing.T) string {
	t.Helper()
	if err := testbed.Preflight(); err != nil {
		t.Fatal(err)
	}
	// `go test` puts its own GOROOT/bin first on the PATH of test binaries.
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("finding the go command: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "testbed")
	out, err := exec.Command(goBin, "build", "-o", bin, "../cmd/testbed").CombinedOutput()
	if err != nil {
		t.Fatalf("building the testbed command: %v\n%s", err, out)
	}
	return bin
}

// seen is what a running testbed was made of, read while it ran.
type seen struct {
	dir   string // its instance directory
	pidNS string // its PID namespace, as /proc/PID/ns/pid reads
	procs int    // processes in that namespace
	loops []string
}

// startRun starts `testbed run -- sh -c script` in its own directory and
// waits until the script prints "ready"; it returns the command, its stdin
// and stdout, and what the running testbed holds.
func startRun(t *testing.T, bin, script string) (*exec.Cmd, io.WriteCloser, *bufio.Reader, seen) {
	t.Helper()
	base := filepath.Join(testbed.DefaultDir, "hosttest")
	cmd := exec.Command(bin, "run", "--", "sh", "-c", script)
	cmd.Env = append(os.Environ(), testbed.EnvDir+"="+base)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		_ = testbed.Stop(t.Context(), base)
		_ = os.Remove(base)
	})
	r := bufio.NewReader(stdout)
	line, err := r.ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "ready" {
		t.Fatalf("testbed run: first line %q, %v; want ready", line, err)
	}
	tb, err := testbed.Attach(base)
	if err != nil {
		t.Fatalf("attaching to the running testbed: %v", err)
	}
	s := seen{dir: tb.Dir}
	if s.pidNS, err = os.Readlink(filepath.Join("/proc", strconv.Itoa(tb.PID), "ns", "pid")); err != nil {
		t.Fatal(err)
	}
	s.procs = len(processesIn(t, s.pidNS))
	s.loops = loopsUnder(t, base)
	if s.procs < 3 || len(s.loops) == 0 {
		t.Fatalf("running testbed has %d processes and loop devices %v; want systemd, dbus, zfs-fuse and a loop btrfs", s.procs, s.loops)
	}
	return cmd, stdin, r, s
}

// processesIn lists the pids whose PID namespace is ns.
func processesIn(t *testing.T, ns string) []string {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []string
	for _, e := range entries {
		if link, err := os.Readlink(filepath.Join("/proc", e.Name(), "ns", "pid")); err == nil && link == ns {
			if state := procState(e.Name()); state != "Z" && state != "X" {
				pids = append(pids, e.Name())
			}
		}
	}
	return pids
}

func procState(pid string) string {
	data, err := os.ReadFile(filepath.Join("/proc", pid, "stat"))
	if err != nil {
		return "X"
	}
	s := string(data)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2 : i+3]
	}
	return ""
}

// loopsUnder lists loop devices whose backing file is below dir.
func loopsUnder(t *testing.T, dir string) []string {
	t.Helper()
	out, err := exec.Command("losetup", "-n", "-O", "NAME,BACK-FILE", "-l").Output()
	if err != nil {
		t.Fatalf("losetup: %v", err)
	}
	var loops []string
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && strings.HasPrefix(f[1], dir+"/") {
			loops = append(loops, line)
		}
	}
	return loops
}

// mountsUnder lists the host's mounts below dir.
func mountsUnder(t *testing.T, dir string) []string {
	t.Helper()
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var mounts []string
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], dir) {
			mounts = append(mounts, f[4])
		}
	}
	return mounts
}

// requireNothingLeft checks that no process, loop device or mount of the
// testbed remains (waiting a little: the kernel frees loops asynchronously),
// and, when dirGone, that its directory is removed.
func requireNothingLeft(t *testing.T, s seen, dirGone bool) {
	t.Helper()
	base := filepath.Dir(s.dir)
	deadline := time.Now().Add(10 * time.Second)
	for {
		procs := processesIn(t, s.pidNS)
		loops := loopsUnder(t, base)
		mounts := mountsUnder(t, base)
		_, statErr := os.Stat(s.dir)
		dirLeft := dirGone && !errors.Is(statErr, os.ErrNotExist)
		if len(procs) == 0 && len(loops) == 0 && len(mounts) == 0 && !dirLeft {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("left behind: processes %v, loop devices %v, mounts %v, directory left %v", procs, loops, mounts, dirLeft)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestRunPassesTheExitStatusAndLeavesNothing(t *testing.T) {
	bin := buildTestbed(t)
	cmd, stdin, stdout, s := startRun(t, bin, `echo ready; read line; cat /proc/1/comm; exit 3`)
	stdin.Close() // lets the script go on
	rest, _ := io.ReadAll(stdout)
	err := cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 3 {
		t.Fatalf("testbed run of a command exiting 3: %v", err)
	}
	if strings.TrimSpace(string(rest)) != "systemd" {
		t.Fatalf("PID 1 inside the testbed is %q; want systemd", rest)
	}
	requireNothingLeft(t, s, true)
}

func TestInterruptEndsTheTestbed(t *testing.T) {
	bin := buildTestbed(t)
	cmd, _, _, s := startRun(t, bin, `echo ready; exec sleep 60`)
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 130 {
		t.Fatalf("testbed run after SIGINT: %v; want exit status 130", err)
	}
	requireNothingLeft(t, s, true)
}

func TestKillingTheOwnerKillsTheTestbed(t *testing.T) {
	bin := buildTestbed(t)
	cmd, _, _, s := startRun(t, bin, `echo ready; exec sleep 60`)
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	// Nothing could clean up: the kernel must end the testbed by itself.
	requireNothingLeft(t, s, false)
	// What is left on disk is cleared by the next testbed or `testbed down`.
	if err := testbed.Stop(t.Context(), filepath.Dir(s.dir)); err != nil {
		t.Fatalf("testbed down after a killed owner: %v", err)
	}
	requireNothingLeft(t, s, true)
}
