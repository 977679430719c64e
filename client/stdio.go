package client

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/godbus/dbus/v5"
)

// outputGrace is how long, once a command ended, its output pipes may
// stay silent before they are closed: one stays open when something the
// command left behind (Detach) holds it. Each read that brings data
// extends it, so a slow Writer loses nothing the command wrote.
const outputGrace = time.Second

// stdio is what a command gets for its stdin, stdout and stderr: an
// *os.File of the caller's as it is (but a terminal, which the daemon
// refuses), /dev/null for nil, and otherwise a pipe this side copies
// through while the command runs.
type stdio struct {
	files [3]*os.File // the command's, passed with Exec
	// opened are those of files this side made (pipes' ends, /dev/null):
	// closed once Exec's call is done, the daemon having its own copies.
	opened    []*os.File
	stdinW    *os.File // the stdin pipe's end this side writes
	stdinOnce sync.Once
	stdinDone chan struct{}
	pumps     []*pump
}

// pump copies what a command writes to a pipe to the caller's Writer.
type pump struct {
	r    *os.File
	w    io.Writer
	name string
	// ended: the command ended, a read waits outputGrace at most;
	// stopped: stop now.
	ended, stopped atomic.Bool
	done           chan struct{}
	err            error // of writing to w
}

func newStdio(stdin io.Reader, stdout, stderr io.Writer) (*stdio, error) {
	s := &stdio{}
	if err := s.input(stdin); err != nil {
		s.closeAll()
		return nil, err
	}
	out, err := s.output(stdout, "stdout", nil)
	if err != nil {
		s.closeAll()
		return nil, err
	}
	s.files[1] = out
	// The same Writer for both (a combined output) gets one pipe, as
	// os/exec does, so that its Write is never called twice at once.
	var same *os.File
	if sameWriter(stdout, stderr) && stdout != nil {
		same = out
	}
	if s.files[2], err = s.output(stderr, "stderr", same); err != nil {
		s.closeAll()
		return nil, err
	}
	return s, nil
}

func (s *stdio) input(r io.Reader) error {
	if f, ok := r.(*os.File); ok && f != nil && !isTerminal(f) {
		s.files[0] = f
		return nil
	}
	if isNil(r) {
		f, err := os.Open(os.DevNull)
		if err != nil {
			return fmt.Errorf("opening %s for stdin: %w", os.DevNull, err)
		}
		s.files[0], s.opened = f, append(s.opened, f)
		return nil
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("making a pipe for stdin: %w", err)
	}
	s.files[0], s.opened, s.stdinW = pr, append(s.opened, pr), pw
	s.stdinDone = make(chan struct{})
	go func() {
		defer close(s.stdinDone)
		_, _ = io.Copy(pw, r) // the command may end without reading it all
		s.closeStdin()
	}()
	return nil
}

func (s *stdio) output(w io.Writer, name string, same *os.File) (*os.File, error) {
	if same != nil {
		return same, nil
	}
	if f, ok := w.(*os.File); ok && f != nil && !isTerminal(f) {
		return f, nil
	}
	if isNil(w) {
		f, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
		if err != nil {
			return nil, fmt.Errorf("opening %s for %s: %w", os.DevNull, name, err)
		}
		s.opened = append(s.opened, f)
		return f, nil
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("making a pipe for %s: %w", name, err)
	}
	s.opened = append(s.opened, pw)
	p := &pump{r: pr, w: w, name: name, done: make(chan struct{})}
	s.pumps = append(s.pumps, p)
	go p.run()
	return pw, nil
}

func (p *pump) run() {
	defer close(p.done)
	defer p.r.Close()
	buf := make([]byte, 64<<10)
	for !p.stopped.Load() {
		if p.ended.Load() {
			_ = p.r.SetReadDeadline(time.Now().Add(outputGrace))
		}
		n, err := p.r.Read(buf)
		if n > 0 {
			if _, werr := p.w.Write(buf[:n]); werr != nil {
				// The command's next write fails (EPIPE) once this
				// end is closed.
				p.err = fmt.Errorf("writing the command's %s: %w", p.name, werr)
				return
			}
		}
		if err != nil {
			return // EOF, the grace ran out, or stopped
		}
	}
}

// fds are the command's three files, as Exec's h arguments.
func (s *stdio) fds() []any {
	return []any{dbus.UnixFD(s.files[0].Fd()), dbus.UnixFD(s.files[1].Fd()), dbus.UnixFD(s.files[2].Fd())}
}

// release closes the command's ends this side made; called once Exec's
// call is done (never before: the numbers must stay valid until the
// message is sent).
func (s *stdio) release() {
	for _, f := range s.opened {
		f.Close()
	}
	s.opened = nil
}

func (s *stdio) closeStdin() {
	s.stdinOnce.Do(func() {
		if s.stdinW != nil {
			s.stdinW.Close()
		}
	})
}

// finish ends the copying once the command ended (or, with hard, at
// once) and returns the first error of writing to a Writer. No Writer is
// written to after it returns.
func (s *stdio) finish(hard bool) error {
	s.closeStdin()
	for _, p := range s.pumps {
		if hard {
			p.stopped.Store(true)
			_ = p.r.SetReadDeadline(time.Now())
			continue
		}
		p.ended.Store(true)
		_ = p.r.SetReadDeadline(time.Now().Add(outputGrace))
	}
	var errs []error
	for _, p := range s.pumps {
		<-p.done
		errs = append(errs, p.err)
	}
	if s.stdinDone != nil {
		// A Reader whose Read blocks is left to return on its own: what
		// it then reads goes nowhere.
		select {
		case <-s.stdinDone:
		case <-time.After(outputGrace):
		}
	}
	return errors.Join(errs...)
}

// closeAll undoes a newStdio that failed half way.
func (s *stdio) closeAll() {
	s.release()
	_ = s.finish(true)
}

// isTerminal is isatty(3): the daemon refuses a terminal as a command's
// stdio (what the command leaves behind could read the caller's keys).
func isTerminal(f *os.File) bool {
	rc, err := f.SyscallConn()
	if err != nil {
		return false
	}
	var termios syscall.Termios
	var errno syscall.Errno
	if err := rc.Control(func(fd uintptr) {
		_, _, errno = syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TCGETS, uintptr(unsafe.Pointer(&termios)))
	}); err != nil {
		return false
	}
	return errno == 0
}

// isNil says whether v is nil, also as a typed nil pointer in an
// interface (a nil *bytes.Buffer as an io.Writer).
func isNil(v any) bool {
	if v == nil {
		return true
	}
	switch x := v.(type) {
	case *os.File:
		return x == nil
	}
	return false
}

// sameWriter is a == b for Writers whose dynamic type may not be
// comparable (os/exec's interfaceEqual).
func sameWriter(a, b io.Writer) (same bool) {
	defer func() {
		if recover() != nil {
			same = false
		}
	}()
	return a == b
}
