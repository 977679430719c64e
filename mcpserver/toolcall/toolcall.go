// Package toolcall is what a tool call of the MCP server carries in its
// context: its request, so that a long call tells how it goes
// (progress notifications, when the client sent a progressToken; a
// command's output coalesced to a few a second), and the content its
// tool adds to its result beside the structured output (resource links,
// images). Both ride on the context, set by one receiving middleware,
// so that the tools' handlers keep their typed signatures.
package toolcall

import (
	"context"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/internal/tailbuf"
)

const (
	// Every is the least time between two notifications of a
	// call: a command printing a flood is told a few times a second.
	Every = 300 * time.Millisecond
	// Excerpt bounds the output one notification carries: the
	// last bytes written since the one before.
	Excerpt = 1 << 10
	// maxExtraContent bounds what a call adds to its result.
	maxExtraContent = 16
)

type callKey struct{}

// call is one tools/call under way: its request, for progress, and the
// content its tool adds to the result.
type call struct {
	req *mcp.CallToolRequest

	mu    sync.Mutex
	extra []mcp.Content
	// sent counts the notifications sent: progress must grow with each.
	sent float64
}

// Middleware is the server's receiving middleware: a tools/call gets a
// call in its context, and the content its tool attached is appended to
// the result's.
func Middleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		r, ok := req.(*mcp.CallToolRequest)
		if !ok {
			return next(ctx, method, req)
		}
		c := &call{req: r}
		res, err := next(context.WithValue(ctx, callKey{}, c), method, req)
		if tr, ok := res.(*mcp.CallToolResult); ok && err == nil && !tr.IsError {
			c.mu.Lock()
			tr.Content = append(tr.Content, c.extra...)
			c.mu.Unlock()
		}
		return res, err
	}
}

func callOf(ctx context.Context) *call {
	c, _ := ctx.Value(callKey{}).(*call)
	return c
}

// Attach adds content to the result of ctx's call (when it succeeds);
// past maxExtraContent it is dropped.
func Attach(ctx context.Context, content mcp.Content) {
	c := callOf(ctx)
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.extra) < maxExtraContent {
		c.extra = append(c.extra, content)
	}
}

// Progressing says whether ctx's call asked for progress.
func Progressing(ctx context.Context) bool {
	c := callOf(ctx)
	return c != nil && c.req.Params != nil && c.req.Params.GetProgressToken() != nil && c.req.Session != nil
}

// Notify sends a progress notification of ctx's call, if it asked for
// them; total is 0 when unknown. A client gone is no matter here: the
// call's own end tells.
func Notify(ctx context.Context, message string, total float64) {
	if !Progressing(ctx) {
		return
	}
	c := callOf(ctx)
	c.mu.Lock()
	c.sent++
	n := c.sent
	c.mu.Unlock()
	if total > 0 && n > total {
		total = 0 // more steps than foreseen: unknown rather than over 100%
	}
	_ = c.req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
		ProgressToken: c.req.Params.GetProgressToken(), Progress: n, Total: total, Message: message})
}

// outputProgress tells a command's output as it comes: each stream's
// last Excerpt bytes since the last notification are kept, and
// sent at most once a Every, so a flood of output is a few
// notifications a second.
type outputProgress struct {
	ctx  context.Context
	mu   sync.Mutex
	tail [2]*tailbuf.Buffer // stdout's, stderr's
	done chan struct{}
	wg   sync.WaitGroup
}

// Output tees stdout and stderr into progress notifications of
// ctx's call; stop sends what is left and ends it. Without a
// progressToken the writers are returned as they are.
func Output(ctx context.Context, stdout, stderr io.Writer) (io.Writer, io.Writer, func()) {
	if !Progressing(ctx) {
		return stdout, stderr, func() {}
	}
	p := &outputProgress{ctx: ctx, done: make(chan struct{})}
	p.take()
	p.wg.Go(p.run)
	stop := func() {
		close(p.done)
		p.wg.Wait()
	}
	return io.MultiWriter(stdout, streamWriter{p, 0}), io.MultiWriter(stderr, streamWriter{p, 1}), stop
}

type streamWriter struct {
	p *outputProgress
	i int
}

func (w streamWriter) Write(b []byte) (int, error) {
	w.p.mu.Lock()
	defer w.p.mu.Unlock()
	return w.p.tail[w.i].Write(b)
}

// take returns the tails kept and starts new ones.
func (p *outputProgress) take() [2]*tailbuf.Buffer {
	old := p.tail
	p.tail = [2]*tailbuf.Buffer{{Max: Excerpt}, {Max: Excerpt}}
	return old
}

func (p *outputProgress) run() {
	t := time.NewTicker(Every)
	defer t.Stop()
	for {
		select {
		case <-p.done:
			p.flush()
			return
		case <-p.ctx.Done():
			return
		case <-t.C:
			p.flush()
		}
	}
}

// flush sends what was written since the last notification, if any.
func (p *outputProgress) flush() {
	p.mu.Lock()
	tails := p.take()
	p.mu.Unlock()
	var parts []string
	for i, name := range []string{"stdout", "stderr"} {
		if text := tails[i].String(); text != "" {
			parts = append(parts, name+": "+text)
		}
	}
	if len(parts) > 0 {
		Notify(p.ctx, strings.Join(parts, "\n"), 0)
	}
}
