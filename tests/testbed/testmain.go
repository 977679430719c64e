package testbed

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Main runs a package's tests inside a testbed. Called from TestMain on the
// host, it brings a testbed up, runs this same test binary inside it with
// the same arguments (its output passes through unchanged, so `go test`
// reads it as usual), ends the testbed and exits with the binary's status.
// Inside the testbed it simply runs the tests.
//
// The testbed dies with this process, even on SIGKILL; SIGINT and SIGTERM
// end it cleanly. Only one testbed runs at a time: another test binary
// waits for it.
//
// Without root no testbed can be had: the package's tests that need none
// (TestUnit*: a room's logic against fakes) run alone, and it says so.
func Main(m *testing.M) {
	if Inside() {
		os.Exit(m.Run())
	}
	if os.Geteuid() != 0 {
		os.Exit(runUnitsOnly(m))
	}
	os.Exit(runOutside())
}

// runUnitsOnly runs the tests that need no testbed (TestUnit*), unless the
// caller chose which to run.
func runUnitsOnly(m *testing.M) int {
	flag.Parse()
	if f := flag.Lookup("test.run"); f != nil && f.Value.String() == "" {
		_ = f.Value.Set("^TestUnit")
		fmt.Fprintln(os.Stderr, "testbed: not root: running only the tests that need no testbed (TestUnit*); sudo runs them all")
	}
	return m.Run()
}

// Inside says whether this process runs inside a testbed.
func Inside() bool { return os.Getenv(envInfo) != "" }

func runOutside() int {
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintf(os.Stderr, "testbed: finding the test binary: %v\n", err)
		return 2
	}
	cwd, err := os.Getwd()
	if err != nil {
		fmt.Fprintf(os.Stderr, "testbed: %v\n", err)
		return 2
	}
	return Run(bindsFor(exe, cwd, os.Args[1:]), cwd, append([]string{exe}, os.Args[1:]...))
}

// Run brings a testbed up with binds, runs argv inside it in dir with this
// process's standard streams, ends the testbed and returns the command's
// exit status (2 when the testbed could not run it). The testbed dies with
// this process, even on SIGKILL; SIGINT, SIGTERM and SIGHUP end it cleanly
// and return 130.
func Run(binds []string, dir string, argv []string) int {
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer cancel()
	tb, err := Up(ctx, Config{
		Dir:           os.Getenv(EnvDir),
		Binds:         binds,
		DieWithParent: true,
		Logf: func(format string, args ...any) {
			fmt.Fprintf(os.Stderr, format+"\n", args...)
		},
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "testbed: %v\n", err)
		if ctx.Err() != nil {
			return 130
		}
		return 2
	}
	defer func() {
		if err := tb.Down(); err != nil {
			fmt.Fprintf(os.Stderr, "testbed: ending: %v\n", err)
		}
	}()
	reboots, err := listenReboots(tb)
	if err != nil {
		fmt.Fprintf(os.Stderr, "testbed: %v\n", err)
		return 2
	}
	defer reboots.Close()
	out := &failWatch{w: os.Stdout}
	var resume []string   // the environment of a run after a reboot
	failedBefore := false // a test failed in a run that a reboot ended
	for {
		cmd := tb.Command(context.Background(), dir, argv...)
		cmd.Env = append(cmd.Env, resume...)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, out, os.Stderr
		// Its output goes through a pipe now: a process it left that
		// holds the pipe must not hold the end of the run.
		cmd.WaitDelay = 10 * time.Second
		if err := cmd.Start(); err != nil {
			fmt.Fprintf(os.Stderr, "testbed: running %s inside: %v\n", argv[0], err)
			return 2
		}
		waited := make(chan error, 1)
		go func() { waited <- cmd.Wait() }()
		select {
		case err = <-waited:
		case req := <-reboots.reqs:
			// Rebooting kills the command with everything inside; it
			// runs again from the test that asked.
			fmt.Fprintf(os.Stderr, "testbed: %s asked for a reboot\n", req.Test)
			rebootErr := tb.Reboot(ctx)
			<-waited
			failedBefore = failedBefore || out.failed.Load()
			if rebootErr != nil {
				fmt.Fprintf(os.Stderr, "testbed: %v\n", rebootErr)
				return 2
			}
			data, _ := json.Marshal(req)
			argv = append([]string{argv[0]}, req.Args...)
			resume = []string{envResume + "=" + string(data)}
			continue
		case <-ctx.Done():
			// Ending the testbed kills the command inside with it.
			fmt.Fprintln(os.Stderr, "testbed: interrupted; ending the testbed")
			_ = tb.Down()
			<-waited
			return 130
		}
		break
	}
	if errors.Is(err, exec.ErrWaitDelay) {
		err = nil // it exited 0; what holds its output is the testbed's, and ends with it
	}
	if err == nil && failedBefore {
		return 1
	}
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &exit):
		return exit.ExitCode()
	default:
		fmt.Fprintf(os.Stderr, "testbed: running %s inside: %v\n", argv[0], err)
		return 2
	}
}

// bindsFor lists the host directories a test binary needs inside: the
// module root (sources, testdata, built programs), the binary's own
// directory, and the directories of path flags that `go test` passes
// (-test.testlogfile, -test.coverprofile, -test.gocoverdir, ...), which sit
// in the build directory under the host's /tmp.
func bindsFor(exe, cwd string, args []string) []string {
	binds := []string{filepath.Dir(exe), moduleRoot(cwd)}
	for _, arg := range args {
		name, value, ok := strings.Cut(strings.TrimLeft(arg, "-"), "=")
		if !ok || !strings.HasPrefix(name, "test.") || !filepath.IsAbs(value) {
			continue
		}
		if st, err := os.Stat(value); err == nil && st.IsDir() {
			binds = append(binds, value)
		} else {
			binds = append(binds, filepath.Dir(value))
		}
	}
	return binds
}

// moduleRoot is the nearest directory at or above dir holding go.mod (dir
// itself when there is none).
func moduleRoot(dir string) string {
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d
		}
		if d == filepath.Dir(d) {
			return dir
		}
	}
}

// Require returns the testbed this test runs in. It fails the test with a
// clear message when the package's TestMain does not call Main.
func Require(t testing.TB) *Info {
	t.Helper()
	path := os.Getenv(envInfo)
	if path == "" {
		t.Fatal("testbed.Require: not inside a testbed; the package's TestMain must call testbed.Main(m)")
	}
	info, err := readInfo(path)
	if err != nil {
		t.Fatalf("testbed.Require: %v", err)
	}
	return info
}

// DestroyDatasets destroys each ZFS dataset of datasets with what is
// below it, in order, failing the test for one that will not go.
// zfs-fuse calls a dataset busy for a moment after its last clone is
// gone: each is tried again, on its answer, for up to 10 s.
func DestroyDatasets(t testing.TB, datasets ...string) {
	t.Helper()
	for _, ds := range datasets {
		var out []byte
		var err error
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			if out, err = exec.Command("zfs", "destroy", "-r", ds).CombinedOutput(); err == nil {
				break
			}
		}
		if err != nil {
			t.Errorf("zfs destroy -r %s: %v: %s", ds, err, out)
		}
	}
}

// MustRun runs argv and returns its combined output; a failure fails the
// test with the command, its error and what it printed.
func MustRun(t testing.TB, argv ...string) string {
	t.Helper()
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, out)
	}
	return string(out)
}
