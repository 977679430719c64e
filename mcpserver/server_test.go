package mcpserver

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// connect serves a server with no daemon behind it (nil client) to an
// in-memory client: enough for what is decided before a tool calls the
// daemon, its list and its input's validation.
func connect(t *testing.T) *mcp.ClientSession {
	t.Helper()
	return connectWith(t, Options{})
}

// The hints each tool must carry: what only reads, what may destroy.
var wantHints = map[string]struct{ readOnly, destructive bool }{
	"sandbox_create": {false, false}, "sandbox_list": {true, false}, "sandbox_status": {true, false},
	"sandbox_destroy": {false, true}, "exec": {false, true}, "spawn": {false, true}, "logs": {true, false},
	"file_read": {true, false}, "file_write": {false, true}, "file_edit": {false, true}, "file_list": {true, false},
	"diff": {true, false}, "checkpoint": {false, false}, "rollback": {false, true}, "rebase": {false, true},
	"try": {false, true}, "promote": {false, true}, "promotion_status": {true, false}, "repl": {false, true},
	"system_status":     {true, false},
	"conflict_versions": {true, false}, "merge": {false, true},
	"sandbox_fork": {false, false}, "sandbox_stop": {false, true}, "sandbox_start": {false, false},
}

func TestToolsAndTheirAnnotations(t *testing.T) {
	cs := connect(t)
	got := map[string]bool{}
	for tool, err := range cs.Tools(t.Context(), nil) {
		if err != nil {
			t.Fatal(err)
		}
		got[tool.Name] = true
		want, ok := wantHints[tool.Name]
		if !ok {
			t.Errorf("tool %s is not one this test knows", tool.Name)
			continue
		}
		a := tool.Annotations
		if a == nil || a.Title == "" || a.ReadOnlyHint != want.readOnly || a.DestructiveHint == nil || *a.DestructiveHint != want.destructive {
			t.Errorf("tool %s: annotations %+v; want read-only %v, destructive %v", tool.Name, a, want.readOnly, want.destructive)
		}
		if tool.Description == "" {
			t.Errorf("tool %s has no description", tool.Name)
		}
		schema, _ := json.Marshal(tool.InputSchema)
		if !strings.Contains(string(schema), `"additionalProperties":false`) {
			t.Errorf("tool %s's input schema lets unknown arguments through: %s", tool.Name, schema)
		}
		if strings.Contains(tool.Name, "approve") || strings.Contains(tool.Name, "reject") {
			t.Errorf("tool %s decides a promotion: only an administrator may", tool.Name)
		}
	}
	for name := range wantHints {
		if !got[name] {
			t.Errorf("no tool %s", name)
		}
	}
}

// Bad input is refused before any call to the daemon: an unknown tool as
// a protocol error (the SDK's), an unknown or missing argument as a tool
// error naming it.
func TestBadInputIsRefused(t *testing.T) {
	cs := connect(t)
	ctx := t.Context()
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "sandbox_approve", Arguments: map[string]any{}}); err == nil ||
		!strings.Contains(err.Error(), "sandbox_approve") {
		t.Errorf("an unknown tool: %v; want an error naming it", err)
	}
	for _, tc := range []struct {
		name string
		args map[string]any
		want string
	}{
		{"exec", map[string]any{"sandbox": "x", "command": []string{"true"}, "shell": true}, "shell"},
		{"file_read", map[string]any{"sandbox": "x"}, "path"},
		{"file_read", map[string]any{"sandbox": "x", "path": "a", "max_bytes": "ten"}, "max_bytes"},
		{"sandbox_list", map[string]any{"all": true}, "all"},
		{"system_status", map[string]any{}, "sandbox"},
		{"sandbox_create", map[string]any{"project": "web", "boot": "yes"}, "boot"},
		{"sandbox_fork", map[string]any{"sandbox": "x", "count": 17}, "give 1 to 16 forks"},
		{"sandbox_fork", map[string]any{"sandbox": "x", "count": -1}, "count"},
		{"sandbox_fork", map[string]any{"sandbox": "x", "count": 2, "names": []string{"a", "b", "c"}}, "3 names for 2 forks"},
		{"sandbox_fork", map[string]any{"sandbox": "x", "names": []string{"a", "b"}}, "2 names for 1 forks"},
		{"sandbox_fork", map[string]any{"sandbox": "x", "spawn": []string{"make serve", ""}}, "spawn[1] is empty"},
		{"sandbox_fork", map[string]any{"sandbox": "x", "spawn": "make serve"}, "spawn: want an array of strings"},
		{"sandbox_stop", map[string]any{}, "sandbox"},
		{"sandbox_start", map[string]any{"sandbox": "x", "boot": true}, "boot"},
		{"spawn", map[string]any{"sandbox": "x", "shell": "sleep 9", "restart": "yes"}, "restart: want true or false"},
		{"try", map[string]any{"variants": []string{"true"}, "check": "true"}, "project is not given"},
	} {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tc.name, Arguments: tc.args})
		if err != nil {
			t.Errorf("%s %v: a protocol error %v; want a tool error", tc.name, tc.args, err)
			continue
		}
		if text := resultText(res); !res.IsError || !strings.Contains(text, tc.want) {
			t.Errorf("%s %v: IsError %v, %q; want a tool error naming %q", tc.name, tc.args, res.IsError, text, tc.want)
		}
	}
}

func resultText(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			b.WriteString(t.Text)
		}
	}
	return b.String()
}

// A bad bound is the server's own tool error, before the daemon is asked.
func TestBoundsAreToolErrors(t *testing.T) {
	s := &server{opts: Options{}.withDefaults()}
	ctx := context.Background()
	if _, err := s.exec(ctx, execIn{Sandbox: "x", Command: []string{"true"}, Timeout: 7200}); err == nil || !strings.Contains(err.Error(), "over the most") {
		t.Errorf("exec with a timeout over the most: %v", err)
	}
	if _, err := s.readFile(ctx, readIn{Sandbox: "x", Path: "a", MaxBytes: 2 << 20}); err == nil || !strings.Contains(err.Error(), "at most 1048576") {
		t.Errorf("file_read of more than the cap: %v", err)
	}
	big := strings.Repeat("x", 1<<20+1)
	if _, err := s.writeFile(ctx, writeIn{Sandbox: "x", Path: "a", Content: big}); err == nil || !strings.Contains(err.Error(), "over the 1048576") {
		t.Errorf("file_write of more than the cap: %v", err)
	}
}
