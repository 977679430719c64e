// Package command runs the external tools of the storage backends (zfs,
// zpool, btrfs, losetup, mount) through one place: every run takes a
// context, is logged with its duration, and fails with an *Error that keeps
// the exit status and standard error, so that backends can turn known
// messages into typed errors.
package command

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os/exec"
	"strings"
	"time"
)

// Logger receives a debug line per command; slog.Default() when nil.
var Logger *slog.Logger

// Error is a command that failed: it did not start, or exited non-zero.
type Error struct {
	Argv   []string
	Stderr string
	Err    error // *exec.ExitError, or why it did not start
}

func (e *Error) Error() string {
	msg := strings.TrimSpace(e.Stderr)
	if msg == "" {
		msg = e.Err.Error()
	}
	return fmt.Sprintf("%s: %s", strings.Join(e.Argv, " "), msg)
}

func (e *Error) Unwrap() error { return e.Err }

// Cmd is one run of a tool.
type Cmd struct {
	Argv   []string
	Stdin  io.Reader // nil: no input
	Stdout io.Writer // nil: captured and returned by Run
}

// Run runs c and returns its standard output when c.Stdout is nil. The
// process is killed when ctx ends.
func Run(ctx context.Context, c Cmd) ([]byte, error) {
	if len(c.Argv) == 0 {
		return nil, errors.New("command: empty argv")
	}
	cmd := exec.CommandContext(ctx, c.Argv[0], c.Argv[1:]...)
	var stdout, stderr bytes.Buffer
	cmd.Stdin = c.Stdin
	cmd.Stdout = &stdout
	if c.Stdout != nil {
		cmd.Stdout = c.Stdout
	}
	cmd.Stderr = &stderr
	cmd.WaitDelay = 5 * time.Second
	start := time.Now()
	err := cmd.Run()
	logger().LogAttrs(ctx, slog.LevelDebug, "exec",
		slog.String("argv", strings.Join(c.Argv, " ")),
		slog.Duration("took", time.Since(start)),
		slog.Bool("ok", err == nil))
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%v)", ctx.Err(), err)
		}
		return stdout.Bytes(), &Error{Argv: c.Argv, Stderr: stderr.String(), Err: err}
	}
	return stdout.Bytes(), nil
}

// Output runs argv and returns its standard output.
func Output(ctx context.Context, argv ...string) ([]byte, error) {
	return Run(ctx, Cmd{Argv: argv})
}

// Lines runs argv and splits its output into lines of tab-separated fields
// (the form of `zfs list -H`), without empty lines.
func Lines(ctx context.Context, argv ...string) ([][]string, error) {
	out, err := Output(ctx, argv...)
	if err != nil {
		return nil, err
	}
	var lines [][]string
	for _, line := range strings.Split(string(out), "\n") {
		if line != "" {
			lines = append(lines, strings.Split(line, "\t"))
		}
	}
	return lines, nil
}

// Stderr returns the standard error of a failed command in err's chain.
func Stderr(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Stderr
	}
	return ""
}

func logger() *slog.Logger {
	if Logger != nil {
		return Logger
	}
	return slog.Default()
}
