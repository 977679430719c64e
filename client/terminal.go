package client

import (
	"context"
	"fmt"
	"os"
	"syscall"
	"unsafe"

	"github.com/godbus/dbus/v5"

	"github.com/sandboxd/sandboxd/sandboxd1"
)

// Terminal is a command ExecTerminal started on a new pseudo-terminal
// of the sandbox's: File is the terminal's master, which the caller
// reads (the command's output) and writes (its input).
type Terminal struct {
	File   *os.File
	s      *Sandbox
	id     string
	w      *exitWatcher
	exited <-chan exitResult
}

// ExecTerminal runs argv in the sandbox as the caller on a terminal of
// rows×cols (TERM=xterm-256color), as `sandboxctl shell` does; opts'
// Env, Dir, Root and Timeout apply. Wait for its end, then Close.
func (s *Sandbox) ExecTerminal(ctx context.Context, argv []string, opts ExecOptions, rows, cols uint16) (*Terminal, error) {
	op := "running " + commandName(argv) + " on a terminal in " + s.label()
	if len(argv) == 0 {
		return nil, newError(op, sandboxd1.ErrorInvalidArgs, "no command given")
	}
	w, err := s.c.watcher(ctx)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	daemon, err := w.owner(ctx)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	var id string
	var fd dbus.UnixFD
	if err := s.call(ctx, op, sandboxd1.MethodExecTerminal, []any{argv, opts.options(false), rows, cols}, &id, &fd); err != nil {
		return nil, err
	}
	return &Terminal{File: os.NewFile(uintptr(fd), "terminal"), s: s, id: id, w: w, exited: w.wait(id, daemon)}, nil
}

// Resize sets the terminal's size (TIOCSWINSZ on its master).
func (t *Terminal) Resize(rows, cols uint16) error {
	ws := struct{ row, col, x, y uint16 }{rows, cols, 0, 0}
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, t.File.Fd(), syscall.TIOCSWINSZ, uintptr(unsafe.Pointer(&ws))); e != 0 {
		return fmt.Errorf("resizing the terminal of command %s: %w", t.id, e)
	}
	return nil
}

// Wait waits for the command's end and returns how it ended; when ctx
// ends first the command is killed.
func (t *Terminal) Wait(ctx context.Context) (ExitStatus, error) {
	select {
	case r := <-t.exited:
		if r.err != nil {
			return ExitStatus{}, fmt.Errorf("command %s on a terminal in %s: %w", t.id, t.s.label(), r.err)
		}
		return r.status, nil
	case <-ctx.Done():
		t.s.kill(ctx, t.w, t.id, t.exited)
		return ExitStatus{}, fmt.Errorf("command %s on a terminal in %s: %w", t.id, t.s.label(), ctx.Err())
	}
}

// Close closes the terminal's master.
func (t *Terminal) Close() error { return t.File.Close() }
