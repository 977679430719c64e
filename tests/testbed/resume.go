package testbed

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// A test inside the testbed dies with it, so it cannot call Reboot: it asks
// the process that runs the testbed (Run) through a FIFO in the shared
// directory, and Run reboots the testbed, then runs the test binary again
// from that test on. The test runs twice: before the reboot it sets up and
// calls RebootTest, which does not return; after it, Rebooted reads back
// the state it gave and the test goes on:
//
//	var st struct{ ID string }
//	if !testbed.Rebooted(t, &st) {
//		st.ID = ... // make what must survive
//		testbed.RebootTest(t, st)
//	}
//	... check what survived (cleanups go here: the first run's never run)
const (
	rebootFIFO = "reboot.fifo"
	envResume  = "SANDBOXD_TESTBED_RESUME"
)

// rebootRequest is what a test sends through the FIFO, and what the test
// binary run after the reboot finds in its environment.
type rebootRequest struct {
	Test  string          `json:"test"`  // the top-level test that asked
	Args  []string        `json:"args"`  // the binary's arguments for the run after the boot
	State json.RawMessage `json:"state"` // the test's own, for after the boot
}

// RebootTest reboots the testbed this test runs in (see Reboot): the test
// binary dies with it, and runs again after the boot from this test on,
// which then finds state through Rebooted. It never returns. Only a
// top-level test may ask, in a binary that Run started (TestMain calls
// Main), without -test.shuffle.
func RebootTest(t testing.TB, state any) {
	t.Helper()
	if strings.Contains(t.Name(), "/") {
		t.Fatalf("testbed.RebootTest from subtest %s: only a top-level test can run again after the boot", t.Name())
	}
	if f := flag.Lookup("test.shuffle"); f != nil && f.Value.String() != "off" {
		t.Fatal("testbed.RebootTest: with -test.shuffle the tests after this one cannot be told apart after the boot")
	}
	data, err := json.Marshal(state)
	if err != nil {
		t.Fatalf("testbed.RebootTest: the state: %v", err)
	}
	args, err := resumeArgs(t.Name())
	if err != nil {
		t.Fatalf("testbed.RebootTest: %v", err)
	}
	req, err := json.Marshal(rebootRequest{Test: t.Name(), Args: args, State: data})
	if err != nil {
		t.Fatal(err)
	}
	info := Require(t)
	fifo := filepath.Join(info.Dir, "shared", rebootFIFO)
	// Non-blocking: with no one reading (a testbed of `testbed up`), the
	// open fails at once instead of waiting for a reader.
	f, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		t.Fatalf("testbed.RebootTest: no one can reboot this testbed (%v): only one that testbed.Main or `testbed run` started can", err)
	}
	if _, err := f.Write(append(req, '\n')); err != nil {
		t.Fatalf("testbed.RebootTest: asking for a reboot: %v", err)
	}
	f.Close()
	t.Logf("testbed: %s asked for a reboot; this binary ends with the testbed and runs again after the boot", t.Name())
	// The reboot kills this process; the deadline is only a safety net.
	time.Sleep(2 * time.Minute)
	t.Fatal("testbed.RebootTest: the testbed was not rebooted within 2 minutes")
}

// Rebooted says whether this test runs again after the reboot it asked for
// with RebootTest, and if so reads the state it gave into state.
func Rebooted(t testing.TB, state any) bool {
	t.Helper()
	v := os.Getenv(envResume)
	if v == "" {
		return false
	}
	var req rebootRequest
	if err := json.Unmarshal([]byte(v), &req); err != nil {
		t.Fatalf("testbed.Rebooted: reading %s: %v", envResume, err)
	}
	if req.Test != t.Name() {
		return false
	}
	if err := json.Unmarshal(req.State, state); err != nil {
		t.Fatalf("testbed.Rebooted: the state %s gave before the reboot: %v", req.Test, err)
	}
	return true
}

// resumeArgs are this binary's arguments with -test.run narrowed to test
// and the tests that follow it (in the order they run, which `-test.list`
// gives), so the run after the boot does not repeat those before it.
func resumeArgs(test string) ([]string, error) {
	run := ""
	if f := flag.Lookup("test.run"); f != nil {
		run = f.Value.String()
	}
	// -test.run matches level by level, split at "/": the first level
	// picks top-level tests, the others (kept) their subtests.
	top, sub, _ := strings.Cut(run, "/")
	if top == "" {
		top = "."
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("finding the test binary: %w", err)
	}
	out, err := exec.Command(exe, "-test.list", top).Output()
	if err != nil {
		return nil, fmt.Errorf("listing the tests (%s -test.list %q): %w", exe, top, err)
	}
	names := strings.Fields(string(out))
	i := slices.Index(names, test)
	if i < 0 {
		return nil, fmt.Errorf("test %s is not in the binary's list of tests to run (%q)", test, top)
	}
	quoted := make([]string, 0, len(names)-i)
	for _, n := range names[i:] {
		quoted = append(quoted, regexp.QuoteMeta(n))
	}
	pattern := "^(" + strings.Join(quoted, "|") + ")$"
	if sub != "" {
		pattern += "/" + sub
	}
	var args []string
	for _, a := range os.Args[1:] {
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if name != "test.run" {
			args = append(args, a)
		}
	}
	// A "-test.run" with its value in the next argument: go test never
	// passes it so, so it is not looked for.
	return append(args, "-test.run="+pattern), nil
}

// rebootListener reads the requests of tests inside through the FIFO. It
// holds the FIFO open for reading and writing, so a test's non-blocking
// open finds a reader and no read ever sees its end.
type rebootListener struct {
	f    *os.File
	reqs chan rebootRequest
}

func listenReboots(tb *Testbed) (*rebootListener, error) {
	path := filepath.Join(tb.Dir, "shared", rebootFIFO)
	if err := syscall.Mkfifo(path, 0o600); err != nil && !errors.Is(err, syscall.EEXIST) {
		return nil, fmt.Errorf("making the reboot FIFO %s: %w", path, err)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("opening the reboot FIFO %s: %w", path, err)
	}
	l := &rebootListener{f: f, reqs: make(chan rebootRequest)}
	go func() {
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
		for sc.Scan() {
			var req rebootRequest
			if err := json.Unmarshal(sc.Bytes(), &req); err != nil || req.Test == "" {
				fmt.Fprintf(os.Stderr, "testbed: ignoring a reboot request that is not one (%v): %.200q\n", err, sc.Text())
				continue
			}
			l.reqs <- req
		}
	}()
	return l, nil
}

func (l *rebootListener) Close() { l.f.Close() }

// failWatch passes a test binary's output through and notes whether a
// test failed (a line "--- FAIL: ...", indented for a subtest, framed by
// ^V under test2json): a run ended by a reboot has no exit status to say
// so.
type failWatch struct {
	w      io.Writer
	line   []byte
	failed atomic.Bool
}

func (fw *failWatch) Write(p []byte) (int, error) {
	for _, b := range p {
		if b == '\n' {
			if strings.HasPrefix(strings.TrimLeft(string(fw.line), " \x16"), "--- FAIL:") {
				fw.failed.Store(true)
			}
			fw.line = fw.line[:0]
		} else if len(fw.line) < 256 {
			fw.line = append(fw.line, b)
		}
	}
	return fw.w.Write(p)
}
