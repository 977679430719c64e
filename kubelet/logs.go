package kubelet

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"time"

	"github.com/virtual-kubelet/virtual-kubelet/node/api"

	"github.com/sandboxd/sandboxd/client"
)

// logPoll is how often a followed log is read for more.
const logPoll = 500 * time.Millisecond

// maxLogHeld bounds what one kubectl logs holds: a process's log as the
// daemon keeps it, the current file and the one before, 8 MiB each.
const maxLogHeld = 16 << 20

// GetContainerLogs is kubectl logs: the pod's background process's log
// (ReadLog), its last Tail lines, at most LimitBytes, followed with
// Follow until the process ends or the client goes.
func (p *Provider) GetContainerLogs(ctx context.Context, namespace, name, container string, opts api.ContainerLogOpts) (io.ReadCloser, error) {
	sb, e, err := p.sandboxOf(ctx, namespace, name, container)
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	process := e.process
	e.mu.Unlock()
	if process == "" {
		return nil, fmt.Errorf("pod %s/%s has no command, so no log: its sandbox runs what kubectl exec runs in it", namespace, name)
	}
	// The log as it is now, whole (its rotation keeps maxLogHeld), then
	// cut. A process that writes as fast as it is read never lets the
	// log end: what comes past maxLogHeld is the follow's.
	var buf bytes.Buffer
	var off uint64
	ended := false
	for buf.Len() < maxLogHeld {
		data, next, end, err := sb.ReadLog(ctx, process, off, 0)
		if err != nil {
			return nil, err
		}
		buf.Write(data)
		off, ended = next, end
		if len(data) == 0 {
			break
		}
	}
	head := TailLines(buf.Bytes(), opts.Tail)
	if opts.LimitBytes > 0 && len(head) > opts.LimitBytes {
		head = head[:opts.LimitBytes]
	}
	if !opts.Follow || ended {
		return io.NopCloser(bytes.NewReader(head)), nil
	}
	pr, pw := io.Pipe()
	go func() {
		if _, err := pw.Write(head); err != nil {
			return
		}
		limit := 0
		if opts.LimitBytes > 0 {
			limit = opts.LimitBytes - len(head)
		}
		pw.CloseWithError(follow(ctx, sb, process, off, limit, pw))
	}()
	return pr, nil
}

// follow copies a process's log from off to w, as it grows, until the
// process ends (nil), limit bytes (> 0) were written (nil), or ctx ends
// or w fails (their error). w's pace bounds what is held: one chunk.
func follow(ctx context.Context, sb *client.Sandbox, process string, off uint64, limit int, w io.Writer) error {
	written := 0
	for {
		data, next, end, err := sb.ReadLog(ctx, process, off, 0)
		if err != nil {
			return err
		}
		if limit > 0 && written+len(data) > limit {
			data = data[:limit-written]
		}
		if len(data) > 0 {
			if _, err := w.Write(data); err != nil {
				return err
			}
			written += len(data)
		}
		off = next
		if end || limit > 0 && written >= limit {
			return nil
		}
		if len(data) == 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(logPoll):
			}
		}
	}
}

// logEnd is where a process's log ends now (what a fast writer adds
// while it is read, past maxLogHeld, is not waited for), read and let go
// a chunk at a time.
func logEnd(ctx context.Context, sb *client.Sandbox, process string) (uint64, error) {
	var off, skipped uint64
	for skipped < maxLogHeld {
		data, next, _, err := sb.ReadLog(ctx, process, off, 0)
		if err != nil || len(data) == 0 {
			return next, err
		}
		skipped += next - off
		off = next
	}
	return off, nil
}

// TailLines is the last n lines of b (all of them for n <= 0); a last
// line without its newline counts.
func TailLines(b []byte, n int) []byte {
	if n <= 0 {
		return b
	}
	end := len(b)
	if end > 0 && b[end-1] == '\n' {
		end--
	}
	for i := end - 1; i >= 0; i-- {
		if b[i] == '\n' {
			n--
			if n == 0 {
				return b[i+1:]
			}
		}
	}
	return b
}
