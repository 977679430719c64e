package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// `sandboxctl mcp` driven by the MCP Go SDK's own client, as an agent's
// host would start it: over stdio (and over HTTP with a bearer token),
// against the real daemon. The file tools need the daemon's file API.

// lockedBuffer is a Buffer a process's stderr may write while the test
// reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// mcpSession starts `sandboxctl mcp` (argv, or as given) and connects the
// SDK's client to it over stdio; the session is closed at the test's end.
func mcpSession(t *testing.T, argv ...string) (*mcp.ClientSession, *exec.Cmd, *lockedBuffer) {
	t.Helper()
	if len(argv) == 0 {
		argv = []string{ctlBin(), "mcp"}
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	stderr := &lockedBuffer{}
	cmd.Stderr = stderr
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "integration-test"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connecting to sandboxctl mcp: %v\n%s", err, stderr)
	}
	t.Cleanup(func() { cs.Close() })
	return cs, cmd, stderr
}

// callTool calls a tool and returns its result; a protocol error fails
// the test.
func callTool(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("tool %s %v: a protocol error: %v", name, args, err)
	}
	return res
}

// toolOK calls a tool that must succeed and decodes its structured
// result into out.
func toolOK(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any, out any) {
	t.Helper()
	res := callTool(t, cs, name, args)
	if res.IsError {
		t.Fatalf("tool %s %v: a tool error: %s", name, args, toolText(res))
	}
	b, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	// Decoded into a zero value: a field the result leaves out (omitted
	// when empty) must not keep an earlier call's.
	v := reflect.ValueOf(out).Elem()
	v.Set(reflect.Zero(v.Type()))
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatalf("tool %s: its result %s: %v", name, b, err)
	}
	// exec's and logs' output is in their text alone, once.
	switch out := out.(type) {
	case *mcpExec:
		out.Stdout, out.Stderr = execSections(toolText(res))
	case *mcpLogs:
		out.Output = textSection(toolText(res), "output")
	default:
		// file_read's content and diff's text, in the text alone too.
		v := reflect.ValueOf(out).Elem()
		for field, section := range map[string]string{"Content": "content", "Text": "diff"} {
			if f := v.FieldByName(field); f.IsValid() && f.Kind() == reflect.String && f.String() == "" {
				f.SetString(textSection(toolText(res), section))
			}
		}
	}
}

// textSection is what a tool's text shows under the heading name.
func textSection(text, name string) string {
	_, rest, ok := strings.Cut(text, "\n--- "+name+" ---\n")
	if !ok {
		return ""
	}
	for _, next := range []string{"\n--- stderr ---\n", "\n--- notes ---\n"} {
		if i := strings.Index(rest, next); i >= 0 {
			rest = rest[:i+1]
		}
	}
	return rest
}

// execSections are the stdout and stderr an exec's text shows, each
// under its heading.
func execSections(text string) (stdout, stderr string) {
	return textSection(text, "stdout"), textSection(text, "stderr")
}

// mcpLogs is a logs call's result: its output from its text.
type mcpLogs struct {
	Output string `json:"-"`
	Next   uint64 `json:"next_offset"`
	Ended  bool   `json:"ended"`
}

// toolFails calls a tool that must fail as a tool error matching want,
// and returns its text.
func toolFails(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any, want string) string {
	t.Helper()
	res := callTool(t, cs, name, args)
	text := toolText(res)
	if !res.IsError || !regexp.MustCompile(want).MatchString(text) {
		t.Errorf("tool %s %v: IsError %v, %q; want a tool error matching %q", name, args, res.IsError, text, want)
	}
	return text
}

func toolText(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

type mcpExec struct {
	ExitCode    int      `json:"exit_code"`
	How         string   `json:"how"`
	Stdout      string   `json:"stdout"`
	Stderr      string   `json:"stderr"`
	StdoutBytes int64    `json:"stdout_bytes"`
	Notes       []string `json:"notes"`
}

// sandboxCmdlines lists the command lines of a sandbox's processes, as
// its own /proc shows them.
func sandboxCmdlines(t *testing.T, id string) string {
	t.Helper()
	return ok(t, "exec", id, "--", "sh", "-c", `for p in /proc/[0-9]*; do tr '\0' ' ' < $p/cmdline 2>/dev/null; echo; done`)
}

// TestMCPAgentFixesATestAndPromotes is issue 19's walk: list the tools,
// create, write a test and a source file, run the test (it fails: a
// result, not an error), fix the source with an edit, run it again (it
// passes), see the diff, promote (the project on the host has the fix),
// destroy.
func TestMCPAgentFixesATestAndPromotes(t *testing.T) {
	path := addProject(t, "mcp-agent", map[string]string{"README": "calc\n"})
	cs, _, _ := mcpSession(t)

	wantHints := map[string][2]bool{ // read-only, destructive
		"sandbox_list": {true, false}, "sandbox_status": {true, false}, "file_read": {true, false}, "file_list": {true, false},
		"diff": {true, false}, "logs": {true, false},
		"sandbox_destroy": {false, true}, "rollback": {false, true}, "file_write": {false, true}, "file_edit": {false, true},
		"promote": {false, true}, "sandbox_create": {false, false}, "checkpoint": {false, false},
		"exec": {false, true}, "spawn": {false, true}, "repl": {false, true}, "try": {false, true},
	}
	seen := 0
	for tool, err := range cs.Tools(context.Background(), nil) {
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(tool.Name, "approve") {
			t.Errorf("there is a tool %s: an agent must never approve", tool.Name)
		}
		want, known := wantHints[tool.Name]
		if !known {
			continue
		}
		seen++
		a := tool.Annotations
		if a == nil || a.ReadOnlyHint != want[0] || a.DestructiveHint == nil || *a.DestructiveHint != want[1] {
			t.Errorf("tool %s: annotations %+v; want read-only %v, destructive %v", tool.Name, a, want[0], want[1])
		}
	}
	if seen != len(wantHints) {
		t.Fatalf("%d of the %d tools listed", seen, len(wantHints))
	}

	var sb struct{ ID, Name, State, Network string }
	toolOK(t, cs, "sandbox_create", map[string]any{"project": "mcp-agent", "name": "mcp-agent-1"}, &sb)
	t.Cleanup(func() { ctl(t, "", "destroy", sb.ID) })
	if sb.Name != "mcp-agent-1" || sb.State != "ready" || len(sb.ID) != 12 {
		t.Fatalf("sandbox_create: %+v", sb)
	}
	var wrote struct{ Bytes int }
	toolOK(t, cs, "file_write", map[string]any{"sandbox": sb.Name, "path": "calc.sh", "content": "add() { echo $(($1 - $2)); }\n"}, &wrote)
	toolOK(t, cs, "file_write", map[string]any{"sandbox": sb.Name, "path": "test.sh", "mode": "755",
		"content": "#!/bin/sh\n. ./calc.sh\n[ \"$(add 2 3)\" = 5 ] || { echo \"add 2 3 gave $(add 2 3), want 5\" >&2; exit 1; }\necho PASS\n"}, &wrote)

	var run mcpExec
	toolOK(t, cs, "exec", map[string]any{"sandbox": sb.ID, "command": []string{"./test.sh"}}, &run)
	if run.ExitCode != 1 || run.How != "exited" || run.Stderr != "add 2 3 gave -1, want 5\n" || run.Stdout != "" {
		t.Fatalf("the failing test: %+v", run)
	}
	var edit struct{ Replacements int }
	toolOK(t, cs, "file_edit", map[string]any{"sandbox": sb.ID, "path": "calc.sh", "old": "$1 - $2", "new": "$1 + $2"}, &edit)
	if edit.Replacements != 1 {
		t.Fatalf("file_edit: %d replacements, want 1", edit.Replacements)
	}
	toolOK(t, cs, "exec", map[string]any{"sandbox": sb.ID, "command": []string{"./test.sh"}}, &run)
	if run.ExitCode != 0 || run.Stdout != "PASS\n" || len(run.Notes) != 0 {
		t.Fatalf("the fixed test: %+v", run)
	}
	var read struct{ Content, Encoding string }
	toolOK(t, cs, "file_read", map[string]any{"sandbox": sb.ID, "path": "calc.sh"}, &read)
	if read.Content != "add() { echo $(($1 + $2)); }\n" || read.Encoding != "utf-8" {
		t.Fatalf("file_read calc.sh: %+v", read)
	}

	var diff struct {
		Changes []struct{ Kind, Path string }
		Text    string
	}
	toolOK(t, cs, "diff", map[string]any{"sandbox": sb.ID}, &diff)
	changed := map[string]string{}
	for _, c := range diff.Changes {
		changed[c.Path] = c.Kind
	}
	if changed["calc.sh"] != "added" || changed["test.sh"] != "added" || len(changed) != 2 {
		t.Fatalf("diff: %+v; want calc.sh and test.sh added", diff.Changes)
	}
	toolOK(t, cs, "diff", map[string]any{"sandbox": sb.ID, "text": true}, &diff)
	if !strings.Contains(diff.Text, "+add() { echo $(($1 + $2)); }") || !strings.Contains(diff.Text, "b/test.sh") {
		t.Fatalf("diff text:\n%s", diff.Text)
	}

	var p struct{ Promotion, State, Message string }
	toolOK(t, cs, "promote", map[string]any{"sandbox": sb.ID}, &p)
	if p.State != "done" || !strings.Contains(p.Message, "done") {
		t.Fatalf("promote: %+v", p)
	}
	if b, err := os.ReadFile(filepath.Join(path, "calc.sh")); err != nil || string(b) != "add() { echo $(($1 + $2)); }\n" {
		t.Fatalf("the project's calc.sh after the promotion: %q, %v", b, err)
	}
	if fi, err := os.Stat(filepath.Join(path, "test.sh")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("the project's test.sh after the promotion: %v, %v", fi, err)
	}

	var gone struct{ Destroyed string }
	toolOK(t, cs, "sandbox_destroy", map[string]any{"sandbox": sb.Name}, &gone)
	if gone.Destroyed != sb.ID {
		t.Fatalf("sandbox_destroy: %+v", gone)
	}
	toolFails(t, cs, "sandbox_status", map[string]any{"sandbox": sb.ID}, `no sandbox is called or starts with .*\n\(sandbox_list`)
	var list struct{ Sandboxes []struct{ ID string } }
	toolOK(t, cs, "sandbox_list", map[string]any{}, &list)
	for _, s := range list.Sandboxes {
		if s.ID == sb.ID {
			t.Errorf("sandbox_list lists the destroyed sandbox %s", sb.ID)
		}
	}
}

// TestMCPPromoteWaitsForAnAdmin: a stage that needs an administrator's
// approval leaves promote "waiting", saying who must do what; no tool
// approves, and the project is untouched until an admin does.
func TestMCPPromoteWaitsForAnAdmin(t *testing.T) {
	path := addProject(t, "mcp-wait", map[string]string{"README": "wait\n"})
	reconfigure(t, "\n[[stage]]\nname = \"project\"\ntarget = \"project\"\napproval = \"admin\"\n")
	cs, _, _ := mcpSession(t)
	var sb struct{ ID string }
	toolOK(t, cs, "sandbox_create", map[string]any{"project": "mcp-wait"}, &sb)
	// After the reject below (cleanups run last first): the sandbox goes,
	// and with it what its promotion kept (its source volume).
	t.Cleanup(func() { ctl(t, "", "destroy", sb.ID) })
	var wrote struct{ Bytes int }
	toolOK(t, cs, "file_write", map[string]any{"sandbox": sb.ID, "path": "fix.txt", "content": "fixed\n"}, &wrote)
	var p struct {
		Promotion, State, Message string
		Stages                    []struct{ Name, State string }
	}
	toolOK(t, cs, "promote", map[string]any{"sandbox": sb.ID, "wait_seconds": 30}, &p)
	t.Cleanup(func() { ok(t, "reject", "--reason", "test over", p.Promotion) })
	if p.State != "waiting" || len(p.Stages) != 1 || p.Stages[0].State != "waiting" ||
		!strings.Contains(p.Message, "sandboxctl approve "+p.Promotion) || !strings.Contains(p.Message, "no tool can approve") {
		t.Fatalf("promote through a stage that needs an admin: %+v", p)
	}
	if _, err := os.Stat(filepath.Join(path, "fix.txt")); !os.IsNotExist(err) {
		t.Fatalf("the project has fix.txt before an admin approved: %v", err)
	}
	toolOK(t, cs, "promotion_status", map[string]any{"promotion": p.Promotion}, &p)
	if p.State != "waiting" {
		t.Fatalf("promotion_status: %+v", p)
	}
}

// waitFor polls cond every 100 ms for up to 30 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited 30s for %s", what)
		}
	}
}
