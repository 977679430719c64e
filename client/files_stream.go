package client

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/sandboxd/sandboxd/sandboxd1"
)

// Whole files of any size, through a pipe the daemon reads or writes
// while its call runs (ReadFileTo, WriteFileFrom).

// ReadFileTo writes a whole file of the sandbox to w and returns its
// size. With opts.Limit, a larger file is an error matching ErrTooLarge,
// and w has had its first Limit bytes.
func (s *Sandbox) ReadFileTo(ctx context.Context, path string, w io.Writer, opts ReadOptions) (int64, error) {
	op := fmt.Sprintf("reading %s in %s", path, s.label())
	pr, pw, err := os.Pipe()
	if err != nil {
		return 0, fmt.Errorf("%s: making a pipe: %w", op, err)
	}
	type copied struct {
		n   int64
		err error
	}
	out := &outWriter{w: w, limit: opts.Limit}
	done := make(chan copied, 1)
	go func() {
		var c copied
		c.n, c.err = io.Copy(out, pr)
		// A Writer that failed, or a file past the bound, ends the
		// daemon's copy too (EPIPE).
		pr.Close()
		done <- c
	}()
	o := map[string]dbus.Variant{}
	if opts.Root {
		o[sandboxd1.OptRoot] = dbus.MakeVariant(true)
	}
	var n uint64
	err = call(ctx, s.c.object(s.id), op, sandboxd1.SandboxInterface, sandboxd1.MethodReadFileTo,
		[]any{path, dbus.UnixFD(pw.Fd()), o}, &n)
	pw.Close()
	if err != nil {
		pr.Close() // the daemon may hold the pipe still (ctx ended)
	}
	c := <-done
	// Our side's failure first: it is what broke the daemon's pipe.
	switch {
	case out.tooLarge:
		return c.n, fmt.Errorf("%s: larger than %d bytes: %w", op, opts.Limit, ErrTooLarge)
	case out.err != nil:
		return c.n, fmt.Errorf("%s: writing it out: %w", op, out.err)
	case err != nil:
		return c.n, err
	case c.err != nil:
		return c.n, fmt.Errorf("%s: reading the pipe: %w", op, c.err)
	}
	return c.n, nil
}

// outWriter is ReadFileTo's writer: w, written no further than limit
// bytes (0: no bound), with what went wrong on its side.
type outWriter struct {
	w              io.Writer
	limit, written int64
	tooLarge       bool
	err            error
}

func (o *outWriter) Write(p []byte) (int, error) {
	if o.limit > 0 && o.written+int64(len(p)) > o.limit {
		n, err := o.w.Write(p[:o.limit-o.written])
		o.written += int64(n)
		if err == nil {
			o.tooLarge, err = true, ErrTooLarge
		}
		o.err = err
		return n, err
	}
	n, err := o.w.Write(p)
	o.written += int64(n)
	if err != nil {
		o.err = err
	}
	return n, err
}

// WriteFileFrom writes what r gives, to its end, to a file of the
// sandbox, as WriteFile writes data, and returns the bytes written. A
// read error of r is returned, and the file holds what was read before
// it.
func (s *Sandbox) WriteFileFrom(ctx context.Context, path string, r io.Reader, opts WriteOptions) (int64, error) {
	return s.writeFrom(ctx, path, r, opts.options())
}

func (s *Sandbox) writeFrom(ctx context.Context, path string, r io.Reader, o map[string]dbus.Variant) (int64, error) {
	op := fmt.Sprintf("writing %s in %s", path, s.label())
	pr, pw, err := os.Pipe()
	if err != nil {
		return 0, fmt.Errorf("%s: making a pipe: %w", op, err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := io.Copy(pw, r)
		pw.Close() // the end of the file, for the daemon
		done <- err
	}()
	var n uint64
	err = call(ctx, s.c.object(s.id), op, sandboxd1.SandboxInterface, sandboxd1.MethodWriteFileFrom,
		[]any{path, dbus.UnixFD(pr.Fd()), o}, &n)
	// The daemon is done with it, or failed: a copy still under way
	// then fails (EPIPE), unless r itself blocks.
	pr.Close()
	var rerr error
	select {
	case rerr = <-done:
	case <-time.After(outputGrace):
		pw.Close()
	}
	switch {
	case err != nil:
		return int64(n), err
	case rerr != nil:
		return int64(n), fmt.Errorf("%s: reading what to write: %w", op, rerr)
	}
	return int64(n), nil
}
