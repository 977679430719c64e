package commands

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
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
	out := &tailBuffer{max: max}
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

// tailBuffer keeps the last max bytes written to it (by any number of
// writers), and says how many it cut.
type tailBuffer struct {
	max  int
	mu   sync.Mutex
	buf  []byte
	lost int64
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.lost += int64(over)
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

// String is what was kept, as valid UTF-8 (it goes into records and onto
// the bus), after a line that says how much was cut, if anything was.
func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	kept := string(bytes.ToValidUTF8(t.buf, []byte("?")))
	if t.lost > 0 {
		return fmt.Sprintf("[... the first %d bytes are cut ...]\n", t.lost) + kept
	}
	return kept
}
