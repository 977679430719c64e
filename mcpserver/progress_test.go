package mcpserver

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/mcpserver/resources"
	"github.com/sandboxd/sandboxd/mcpserver/toolcall"
)

type floodIn struct {
	Writes int `json:"writes"`
}

type floodOut struct {
	Wrote int `json:"wrote"`
}

// streamingSession serves a server with no daemon behind it, with a tool
// "flood" that writes a flood of output through exec's progress writers
// and attaches a link, to a client that records the progress it gets.
func streamingSession(t *testing.T) (*mcp.ClientSession, func() []*mcp.ProgressNotificationParams) {
	t.Helper()
	ctx := t.Context()
	m, s := newServer(ctx, nil, Options{})
	add(s, m, &mcp.Tool{Name: "flood"}, func(ctx context.Context, in floodIn) (floodOut, error) {
		out, errw, stop := toolcall.Output(ctx, &strings.Builder{}, &strings.Builder{})
		line := []byte(strings.Repeat("x", 99) + "\n")
		deadline := time.Now().Add(time.Second)
		n := 0
		// A second of output as fast as it goes: what a build's log or
		// `yes` gives.
		for time.Now().Before(deadline) {
			out.Write(line)
			errw.Write([]byte("e"))
			n++
		}
		stop()
		toolcall.Attach(ctx, &mcp.ResourceLink{URI: "sandbox://x/files/out.txt", Name: "out.txt"})
		return floodOut{Wrote: n}, nil
	})
	var mu sync.Mutex
	var got []*mcp.ProgressNotificationParams
	client := mcp.NewClient(&mcp.Implementation{Name: "test"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, r.Params)
		}})
	st, ct := mcp.NewInMemoryTransports()
	if _, err := m.Connect(ctx, st, nil); err != nil {
		t.Fatal(err)
	}
	cs, err := client.Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs, func() []*mcp.ProgressNotificationParams {
		mu.Lock()
		defer mu.Unlock()
		return append([]*mcp.ProgressNotificationParams(nil), got...)
	}
}

// A flood of output is a few notifications a second, each a bounded
// excerpt, their progress growing; without a progressToken there are
// none. What a tool attaches follows its output in the result.
func TestUnitOutputFloodIsAFewNotifications(t *testing.T) {
	cs, progress := streamingSession(t)
	ctx := t.Context()
	params := &mcp.CallToolParams{Name: "flood", Arguments: map[string]any{"writes": 1}}
	params.SetProgressToken("p1")
	res, err := cs.CallTool(ctx, params)
	if err != nil || res.IsError {
		t.Fatalf("flood: %v %v", err, res)
	}
	wrote := int(res.StructuredContent.(map[string]any)["wrote"].(float64))
	if wrote < 1000 {
		t.Fatalf("the tool wrote %d lines in a second: too few to call it a flood", wrote)
	}
	got := progress()
	most := int(time.Second/toolcall.Every) + 2
	if len(got) == 0 || len(got) > most {
		t.Fatalf("%d lines of output gave %d notifications; want 1 to %d", wrote, len(got), most)
	}
	last := 0.0
	for _, p := range got {
		if p.ProgressToken != "p1" || p.Progress <= last {
			t.Errorf("notification %+v: want token p1 and progress over %v", p, last)
		}
		last = p.Progress
		if len(p.Message) > 2*toolcall.Excerpt+200 || !strings.Contains(p.Message, "stdout: ") {
			t.Errorf("a notification of %d bytes, %.80q...: want a bounded excerpt of stdout", len(p.Message), p.Message)
		}
	}
	if !strings.Contains(got[0].Message, "bytes are cut ...]") {
		t.Errorf("the first notification %.120q does not say what it left out", got[0].Message)
	}
	var link *mcp.ResourceLink
	for _, c := range res.Content {
		if l, ok := c.(*mcp.ResourceLink); ok {
			link = l
		}
	}
	if link == nil || link.URI != "sandbox://x/files/out.txt" {
		t.Errorf("the result's content %v has no link the tool attached", res.Content)
	}

	// Then a call without one, and one with another token after it: the
	// client dispatches notifications apart from answers, so the third
	// call's are what tell that the second's had their time.
	if res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "flood", Arguments: map[string]any{"writes": 1}}); err != nil || res.IsError {
		t.Fatalf("flood without a token: %v %v", err, res)
	}
	params.SetProgressToken("p3")
	if res, err := cs.CallTool(ctx, params); err != nil || res.IsError {
		t.Fatalf("flood: %v %v", err, res)
	}
	for _, p := range progress() {
		if p.ProgressToken != "p1" && p.ProgressToken != "p3" {
			t.Errorf("a notification of token %v: the call without a progressToken got one", p.ProgressToken)
		}
	}
}

// The resource templates are listed, and a URI a template does not fit,
// or that names no sandbox, is refused before the daemon is asked.
func TestUnitResourceTemplates(t *testing.T) {
	cs := connect(t)
	ctx := t.Context()
	want := map[string]bool{resources.FilesTemplate: false, resources.DiffTemplate: false, resources.LogsTemplate: false}
	for rt, err := range cs.ResourceTemplates(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := want[rt.URITemplate]; ok {
			want[rt.URITemplate] = true
		}
	}
	for tmpl, seen := range want {
		if !seen {
			t.Errorf("resource template %s is not listed", tmpl)
		}
	}
	for _, uri := range []string{"sandbox://x/nothing", "file:///etc/passwd", "sandbox:///files/a"} {
		if _, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: uri}); err == nil {
			t.Errorf("reading %s: no error", uri)
		}
	}
}
