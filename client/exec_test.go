package client_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/sandboxd/sandboxd/client"
)

func TestExecCopies50MBToAWriter(t *testing.T) {
	ctx := context.Background()
	sb := newSandbox(t, connect(t), client.CreateOptions{})
	const size = 50 << 20
	// A Writer that is no file: the output comes through a pipe.
	sum := sha256.New()
	var n countingWriter
	st, err := sb.Exec(ctx, []string{"sh", "-c", "yes 0123456789abcdef | head -c 52428800"}, client.ExecOptions{
		Stdout: io.MultiWriter(sum, &n),
	})
	if err != nil || !st.Success() {
		t.Fatalf("Exec: %v, %v", st, err)
	}
	want := sha256.Sum256(bytes.Repeat([]byte("0123456789abcdef\n"), size/17+1)[:size])
	if n.n != size || !bytes.Equal(sum.Sum(nil), want[:]) {
		t.Fatalf("got %d bytes (sha256 %x); want the %d bytes the command printed (sha256 %x)", n.n, sum.Sum(nil), size, want)
	}
}

type countingWriter struct{ n int }

func (w *countingWriter) Write(p []byte) (int, error) { w.n += len(p); return len(p), nil }

func TestBinaryStdinComesBackByteForByte(t *testing.T) {
	ctx := context.Background()
	sb := newSandbox(t, connect(t), client.CreateOptions{})
	in := make([]byte, 3<<20)
	rand.Read(in)
	copy(in, "\x00\xff\r\n\x1b[2J\x04") // NUL, a CR, an escape, a ^D: bytes, nothing more
	var out bytes.Buffer
	st, err := sb.Exec(ctx, []string{"cat"}, client.ExecOptions{Stdin: bytes.NewReader(in), Stdout: &out})
	if err != nil || !st.Success() {
		t.Fatalf("Exec cat: %v, %v", st, err)
	}
	if !bytes.Equal(out.Bytes(), in) {
		t.Fatalf("cat gave back %d bytes, not the %d bytes it was given", out.Len(), len(in))
	}
}

func TestExecPassesFilesAsTheyAre(t *testing.T) {
	ctx := context.Background()
	sb := newSandbox(t, connect(t), client.CreateOptions{})
	dir := t.TempDir()
	inPath := filepath.Join(dir, "in")
	if err := os.WriteFile(inPath, []byte("from a file\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	in, err := os.Open(inPath)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.Create(filepath.Join(dir, "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	// Stdout and stderr the same Writer: one pipe, in the order written.
	var both bytes.Buffer
	if _, err := sb.Exec(ctx, []string{"sh", "-c", "cat; echo 1; echo 2 >&2; echo 3"}, client.ExecOptions{Stdin: in, Stdout: out, Stderr: out}); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Exec(ctx, []string{"sh", "-c", "echo 1; echo 2 >&2; echo 3"}, client.ExecOptions{Stdout: &both, Stderr: &both}); err != nil {
		t.Fatal(err)
	}
	if data, _ := os.ReadFile(out.Name()); string(data) != "from a file\n1\n2\n3\n" {
		t.Errorf("the file the command was given holds %q", data)
	}
	if both.String() != "1\n2\n3\n" {
		t.Errorf("one Writer for stdout and stderr got %q", both.String())
	}
}

func TestOneClientRunsManyCommandsAtOnce(t *testing.T) {
	ctx := context.Background()
	sb := newSandbox(t, connect(t), client.CreateOptions{})
	const n = 24
	outs := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			// Each ends at its own time; each Exec gets its own end.
			script := fmt.Sprintf("sleep 0.%d; echo %d; exit %d", n-i, i, i)
			stdout, _, st, err := sb.Output(ctx, []string{"sh", "-c", script}, client.ExecOptions{})
			outs[i], errs[i] = fmt.Sprintf("%s%d", stdout, st.Code), err
		})
	}
	wg.Wait()
	for i := range n {
		if want := fmt.Sprintf("%d\n%d", i, i); errs[i] != nil || outs[i] != want {
			t.Errorf("command %d: %q, %v; want %q", i, outs[i], errs[i], want)
		}
	}
}

func TestATerminalReachesTheCommandThroughAPipe(t *testing.T) {
	ctx := context.Background()
	sb := newSandbox(t, connect(t), client.CreateOptions{})
	master, tty := openPTY(t)
	// The daemon refuses a terminal as a command's stdio: the client
	// copies through a pipe instead, and the command sees no terminal.
	st, err := sb.Exec(ctx, []string{"sh", "-c", "test -t 1 && echo tty || echo pipe"}, client.ExecOptions{Stdout: tty})
	if err != nil || !st.Success() {
		t.Fatalf("Exec with a terminal for stdout: %v, %v", st, err)
	}
	tty.Close()
	got, _ := io.ReadAll(master) // EIO once the terminal's last holder closed it
	if strings.TrimSpace(string(got)) != "pipe" {
		t.Errorf("the terminal got %q; want the command's \"pipe\"", got)
	}
}

// openPTY opens a pseudo-terminal: its master and its terminal.
func openPTY(t *testing.T) (master, tty *os.File) {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { master.Close() })
	var unlock int32
	var n uint32
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, master.Fd(), syscall.TIOCSPTLCK, uintptr(unsafe.Pointer(&unlock))); errno != 0 {
		t.Fatal(errno)
	}
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, master.Fd(), syscall.TIOCGPTN, uintptr(unsafe.Pointer(&n))); errno != 0 {
		t.Fatal(errno)
	}
	tty, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tty.Close() })
	return master, tty
}

func TestCancellingExecKillsTheCommand(t *testing.T) {
	sb := newSandbox(t, connect(t), client.CreateOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	started := &signalWriter{seen: "started", done: make(chan struct{})}
	result := make(chan error, 1)
	go func() {
		_, err := sb.Exec(ctx, []string{"sh", "-c", "echo started; exec sleep 600"}, client.ExecOptions{Stdout: started})
		result <- err
	}()
	select {
	case <-started.done:
	case err := <-result:
		t.Fatalf("Exec returned before it was cancelled: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the command did not start in 30s")
	}
	cancel()
	select {
	case err := <-result:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Exec cancelled: %v; want context.Canceled", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Exec did not return within 15s of its context's end")
	}
	// Nothing of it runs on: the sandbox's processes, by name.
	out, _, _, err := sb.Output(context.Background(), []string{"sh", "-c", "cat /proc/[0-9]*/comm"}, client.ExecOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), "sleep") {
		t.Errorf("sleep still runs in the sandbox after Exec's context ended:\n%s", out)
	}
}

// signalWriter closes done once what it was written holds seen.
type signalWriter struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	seen string
	done chan struct{}
	once sync.Once
}

func (w *signalWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if strings.Contains(w.buf.String(), w.seen) {
		w.once.Do(func() { close(w.done) })
	}
	return len(p), nil
}

func TestExitStatusSaysHowTheCommandEnded(t *testing.T) {
	ctx := context.Background()
	sb := newSandbox(t, connect(t), client.CreateOptions{})
	for _, tc := range []struct {
		argv []string
		opts client.ExecOptions
		want client.ExitStatus
	}{
		{[]string{"sh", "-c", "exit 7"}, client.ExecOptions{}, client.ExitStatus{How: client.HowExited, Code: 7}},
		{[]string{"sh", "-c", "kill -9 $$"}, client.ExecOptions{}, client.ExitStatus{How: client.HowSignaled, Code: 137, Signal: 9}},
		{[]string{"sleep", "30"}, client.ExecOptions{Timeout: 200 * time.Millisecond}, client.ExitStatus{How: client.HowTimedOut}},
		{[]string{"yes"}, client.ExecOptions{OutputLimit: 1 << 20, Stdout: io.Discard}, client.ExitStatus{How: client.HowOutputLimit}},
	} {
		st, err := sb.Exec(ctx, tc.argv, tc.opts)
		if err != nil {
			t.Errorf("%q: %v", tc.argv, err)
			continue
		}
		// What the daemon ended itself: the signal it used is its
		// own, the status a shell's for it.
		if tc.want.How == client.HowTimedOut || tc.want.How == client.HowOutputLimit {
			tc.want.Code, tc.want.Signal = 128+st.Signal, st.Signal
		}
		if st != tc.want || st.Code < 1 {
			t.Errorf("%q: %+v; want %+v", tc.argv, st, tc.want)
		}
	}
	if _, err := sb.Exec(ctx, []string{"/no/such/program"}, client.ExecOptions{}); !errors.Is(err, client.ErrNoProgram) || !strings.Contains(err.Error(), "/no/such/program") {
		t.Errorf("Exec of a program that is not there: %v; want ErrNoProgram naming it", err)
	}
	if _, err := sb.Exec(ctx, []string{"/etc"}, client.ExecOptions{}); !errors.Is(err, client.ErrNotExecutable) || !strings.Contains(err.Error(), "/etc") {
		t.Errorf("Exec of a directory: %v; want ErrNotExecutable naming it", err)
	}
}

func TestARestartOfTheDaemonEndsTheWait(t *testing.T) {
	ctx := context.Background()
	c := connect(t)
	sb := newSandbox(t, c, client.CreateOptions{})
	started := &signalWriter{seen: "started", done: make(chan struct{})}
	result := make(chan error, 1)
	go func() {
		_, err := sb.Exec(ctx, []string{"sh", "-c", "echo started; exec sleep 600"}, client.ExecOptions{Stdout: started})
		result <- err
	}()
	<-started.done
	if out, err := exec.Command("systemctl", "restart", "sandboxd.service").CombinedOutput(); err != nil {
		t.Fatalf("restarting sandboxd: %v\n%s", err, out)
	}
	select {
	case err := <-result:
		if !errors.Is(err, client.ErrDaemonRestarted) {
			t.Fatalf("Exec across a restart: %v; want ErrDaemonRestarted", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Exec still waits 30s after the daemon restarted")
	}
	// The same Client goes on with the new daemon.
	stdout, _, st, err := sb.Output(ctx, []string{"echo", "again"}, client.ExecOptions{})
	if err != nil || string(stdout) != "again\n" || !st.Success() {
		t.Fatalf("Exec after the restart: %q, %v, %v", stdout, st, err)
	}
}
