package commands

import (
	"context"
	"io"
	"os"
	"time"

	"github.com/sandboxd/sandboxd/internal/tailbuf"
)

// RunCaptured runs o in sandbox id with /dev/null for stdin and one pipe
// for stdout and stderr (o.Stdio is set here), and returns how it ended,
// the last max bytes of its output and how long it took. A command still
// running when ctx ends is left to the sandbox's destruction, which ends
// it.
func (c *Commands) RunCaptured(ctx context.Context, id string, o ExecOptions, max int) (Captured, error) {
	var res Captured
	devNull, err := os.Open(os.DevNull)
	if err != nil {
		return res, err
	}
	defer devNull.Close()
	pr, pw, err := os.Pipe()
	if err != nil {
		return res, err
	}
	defer pr.Close()
	o.Stdio = []*os.File{devNull, pw, pw}
	begin := time.Now()
	cmd, err := c.Exec(ctx, id, o)
	pw.Close() // the init holds its own copy
	if err != nil {
		return res, err
	}
	out := &tailbuf.Buffer{Max: max}
	drained := make(chan struct{})
	go func() { _, _ = io.Copy(out, pr); close(drained) }()
	select {
	case <-cmd.Done():
	case <-ctx.Done():
		return res, context.Cause(ctx)
	}
	res.Took = time.Since(begin)
	// What it left running (a daemon it started) may hold the pipe.
	select {
	case <-drained:
	case <-time.After(time.Second):
		pr.Close()
		<-drained
	}
	res.Result, res.Output = cmd.Result(), out.String()
	return res, nil
}
