package mcpserver

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/sandboxd1"
)

// What a long call tells as it goes (progress notifications, when the
// client sent a progressToken), and what a tool adds to its result
// beside its structured output (resource links, images). Both ride on
// the call's context, set by one receiving middleware, so that the
// tools' handlers keep their typed signatures.

const (
	// progressEvery is the least time between two notifications of a
	// call: a command printing a flood is told a few times a second.
	progressEvery = 300 * time.Millisecond
	// progressExcerpt bounds the output one notification carries: the
	// last bytes written since the one before.
	progressExcerpt = 1 << 10
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

// streams is the server's receiving middleware: a tools/call gets a
// call in its context, and the content its tool attached is appended to
// the result's.
func (s *server) streams(next mcp.MethodHandler) mcp.MethodHandler {
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

// attach adds content to the result of ctx's call (when it succeeds);
// past maxExtraContent it is dropped.
func attach(ctx context.Context, content mcp.Content) {
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

// progressing says whether ctx's call asked for progress.
func progressing(ctx context.Context) bool {
	c := callOf(ctx)
	return c != nil && c.req.Params != nil && c.req.Params.GetProgressToken() != nil && c.req.Session != nil
}

// notify sends a progress notification of ctx's call, if it asked for
// them; total is 0 when unknown. A client gone is no matter here: the
// call's own end tells.
func notify(ctx context.Context, message string, total float64) {
	if !progressing(ctx) {
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

// outputProgress tells a command's output as it comes: writes are kept
// (their last progressExcerpt bytes per stream) and sent at most once a
// progressEvery, so a flood of output is a few notifications a second.
type outputProgress struct {
	ctx  context.Context
	mu   sync.Mutex
	tail map[string][]byte // each stream's last bytes since the last one sent
	skip map[string]int64  // bytes written before those
	done chan struct{}
	wg   sync.WaitGroup
}

// streamOutput tees stdout and stderr into progress notifications of
// ctx's call; stop sends what is left and ends it. Without a
// progressToken the writers are returned as they are.
func streamOutput(ctx context.Context, stdout, stderr io.Writer) (io.Writer, io.Writer, func()) {
	if !progressing(ctx) {
		return stdout, stderr, func() {}
	}
	p := &outputProgress{ctx: ctx, tail: map[string][]byte{}, skip: map[string]int64{}, done: make(chan struct{})}
	p.wg.Go(p.run)
	stop := func() {
		close(p.done)
		p.wg.Wait()
	}
	return io.MultiWriter(stdout, p.stream("stdout")), io.MultiWriter(stderr, p.stream("stderr")), stop
}

type streamWriter struct {
	p    *outputProgress
	name string
}

func (p *outputProgress) stream(name string) io.Writer { return streamWriter{p, name} }

func (w streamWriter) Write(b []byte) (int, error) {
	w.p.mu.Lock()
	defer w.p.mu.Unlock()
	t := append(w.p.tail[w.name], b...)
	if over := len(t) - progressExcerpt; over > 0 {
		w.p.skip[w.name] += int64(over)
		t = append(t[:0], t[over:]...)
	}
	w.p.tail[w.name] = t
	return len(b), nil
}

func (p *outputProgress) run() {
	t := time.NewTicker(progressEvery)
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
	var b strings.Builder
	for _, name := range []string{"stdout", "stderr"} {
		t := p.tail[name]
		if len(t) == 0 {
			continue
		}
		if b.Len() > 0 {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "%s: ", name)
		if n := p.skip[name]; n > 0 {
			fmt.Fprintf(&b, "[... %d bytes ...]", n)
			t = trimPartialStart(t)
		}
		text, _ := utf8Text(t)
		b.WriteString(text)
		p.tail[name], p.skip[name] = nil, 0
	}
	p.mu.Unlock()
	if b.Len() > 0 {
		notify(p.ctx, b.String(), 0)
	}
}

// followPromotion is client.WaitPromotion that tells each stage's state
// as it changes: it follows the promotion until it no longer runs.
func (s *server) followPromotion(ctx context.Context, id string) (*sandboxd1.Promotion, error) {
	pause := 50 * time.Millisecond
	told := map[string]string{}
	for {
		p, err := s.c.Promotion(ctx, id)
		if err != nil {
			return p, err
		}
		for _, st := range p.Stages {
			if told[st.Name] == st.State || st.State == sandboxd1.StagePending {
				continue
			}
			told[st.Name] = st.State
			notify(ctx, fmt.Sprintf("promotion %s: stage %s (%s): %s", p.ID, st.Name, st.Target, st.State), 0)
		}
		if p.State != sandboxd1.PromotionRunning {
			return p, nil
		}
		select {
		case <-ctx.Done():
			return p, fmt.Errorf("waiting for promotion %s: %w", id, ctx.Err())
		case <-time.After(pause):
		}
		pause = min(2*pause, time.Second)
	}
}

// tryEvery is how often a try's sandboxes are looked for.
const tryEvery = 500 * time.Millisecond

// watchTry tells, while a try runs, each of its sandboxes as it is made
// (the daemon answers Try only at its end: its sandboxes, named
// PREFIX-N, are what the bus shows meanwhile); stop ends the watch. It
// returns the prefix to give Try: prefix, or one of its own when empty,
// so that the sandboxes can be known.
func (s *server) watchTry(ctx context.Context, prefix string, n int) (string, func()) {
	if !progressing(ctx) {
		return prefix, func() {}
	}
	if prefix == "" {
		prefix = "try-" + randomHex(2)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		seen := map[string]bool{}
		t := time.NewTicker(tryEvery)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
			list, err := s.c.List(ctx)
			if err != nil {
				continue
			}
			for _, e := range list {
				if !strings.HasPrefix(e.Name, prefix+"-") || seen[e.Name] {
					continue
				}
				seen[e.Name] = true
				notify(ctx, fmt.Sprintf("try: %s made (%d of %d): its variant, then the check, run in it", e.Name, len(seen), n), float64(n+1))
			}
		}
	})
	return prefix, func() { close(done); wg.Wait() }
}
