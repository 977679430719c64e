package mcpserver

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/client"
)

// connectWith serves a server made with opts to an in-memory client.
func connectWith(t *testing.T, opts Options) *mcp.ClientSession {
	t.Helper()
	ctx := t.Context()
	m, _ := newServer(ctx, nil, opts)
	st, ct := mcp.NewInMemoryTransports()
	if _, err := m.Connect(ctx, st, nil); err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// typeLists finds every "type" of a JSON schema that is not one string.
func typeLists(path string, v any, found *[]string) {
	switch v := v.(type) {
	case map[string]any:
		for k, sub := range v {
			if k == "type" {
				if _, ok := sub.(string); !ok {
					*found = append(*found, path+": "+strings.TrimSpace(string(must(json.Marshal(sub)))))
				}
				continue
			}
			typeLists(path+"/"+k, sub, found)
		}
	case []any:
		for _, sub := range v {
			typeLists(path+"[]", sub, found)
		}
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// A generic client fills a parameter from its one type: no tool's input
// schema has a type list anywhere, and an array parameter is "array".
func TestInputSchemasHavePlainTypes(t *testing.T) {
	cs := connect(t)
	n := 0
	for tool, err := range cs.Tools(t.Context(), nil) {
		if err != nil {
			t.Fatal(err)
		}
		n++
		var schema any
		if err := json.Unmarshal(must(json.Marshal(tool.InputSchema)), &schema); err != nil {
			t.Fatal(err)
		}
		var found []string
		typeLists(tool.Name, schema, &found)
		for _, f := range found {
			t.Errorf("a type list in an input schema: %s", f)
		}
		if tool.Name == "exec" {
			props := schema.(map[string]any)["properties"].(map[string]any)
			if typ := props["command"].(map[string]any)["type"]; typ != "array" {
				t.Errorf("exec's command is typed %v; want array", typ)
			}
		}
	}
	if n < len(wantHints) {
		t.Errorf("%d tools listed; want %d or more", n, len(wantHints))
	}
}

// The raw arguments a generic client sends, wrong: each error names the
// field, what it wants and what came, and is a tool error.
func TestArgumentErrorsNameTheFieldAndWhatItWants(t *testing.T) {
	cs := connect(t)
	for _, tc := range []struct {
		tool, args, want string
	}{
		{"sandbox_create", `{"project":"web","ttl_minutes":"abc"}`, `ttl_minutes: want an integer, got the string "abc" (ttl_minutes: destroy it after this many minutes)`},
		{"sandbox_create", `{"project":"web","ttl_minutes":1.5}`, `ttl_minutes: want an integer, got the number 1.5`},
		{"sandbox_create", `{"project":"web","boot":"yes"}`, `boot: want true or false, got the string "yes"`},
		{"sandbox_create", `{"project":"web","allow":"example.com:443"}`, `allow: want an array of strings, got the string "example.com:443"`},
		{"sandbox_create", `{}`, `the argument "project" is missing: the project to copy`},
		{"sandbox_list", `{"all":true}`, `sandbox_list takes no argument "all"`},
		{"exec", `{"sandbox":"x","command":"python3 t.py"}`, `command: want an array of strings, got the string "python3 t.py"`},
		{"exec", `{"sandbox":"x","command":["python3",3]}`, `command[1]: want a string, got the number 3`},
		{"file_read", `{"sandbox":"x","path":"a","offset":-1}`, `offset: want an integer of 0 or more, got the number -1`},
		{"file_read", `{"sandbox":"x","path":"a","max_bytes":"ten"}`, `max_bytes: want an integer, got the string "ten"`},
		{"exec", `["x"]`, `want an object of named arguments, got an array of 1`},
		{"exec", `{"sandbox":null,"shell":"true"}`, `sandbox: want a string, got null`},
		// The inspector sends ttl_minutes=abc as null (NaN in JSON).
		{"sandbox_create", `{"project":"web","ttl_minutes":null}`, `ttl_minutes: want an integer, got null (a client that could not read the value as a number sends null`},
		// An optional argument sent as null is not given: the call goes on
		// to the daemon (none here).
		{"exec", `{"sandbox":"x","shell":"true","env":null,"command":null}`, `systemctl start sandboxd`},
	} {
		res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: tc.tool, Arguments: json.RawMessage(tc.args)})
		if err != nil {
			t.Errorf("%s %s: a protocol error %v; want a tool error", tc.tool, tc.args, err)
			continue
		}
		if text := resultText(res); !res.IsError || !strings.Contains(text, tc.want) {
			t.Errorf("%s %s: IsError %v, %q; want a tool error with %q", tc.tool, tc.args, res.IsError, text, tc.want)
		}
	}
}

// exec and spawn take command or shell, one of them; exec's
// max_output_bytes is bounded by the server's cap. All before the daemon.
func TestExecTakesCommandOrShell(t *testing.T) {
	cs := connect(t)
	for _, tc := range []struct {
		tool, args, want string
	}{
		{"exec", `{"sandbox":"x","command":["true"],"shell":"true"}`, "both command and shell are given"},
		{"exec", `{"sandbox":"x"}`, "give command, the program and its arguments"},
		{"spawn", `{"sandbox":"x","command":["true"],"shell":"true"}`, "both command and shell are given"},
		{"spawn", `{"sandbox":"x","command":[]}`, "or shell, a line run by sh -c"},
		{"exec", `{"sandbox":"x","shell":"true","max_output_bytes":1000000}`, "max_output_bytes is 1000000: give 1 to 65536"},
	} {
		res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: tc.tool, Arguments: json.RawMessage(tc.args)})
		if err != nil {
			t.Fatal(err)
		}
		if text := resultText(res); !res.IsError || !strings.Contains(text, tc.want) {
			t.Errorf("%s %s: IsError %v, %q; want a tool error with %q", tc.tool, tc.args, res.IsError, text, tc.want)
		}
	}
	if argv, err := commandOf(nil, "make test | tail"); err != nil || strings.Join(argv, "|") != "sh|-c|make test | tail" {
		t.Errorf("shell as an argv: %q, %v", argv, err)
	}
}

// exec's output is in its text once; the structured content has the
// status and counts, not the output.
func TestExecOutputComesOnce(t *testing.T) {
	out := execOut{ExitCode: 1, How: "exited", Stdout: strings.Repeat("o", 1000), Stderr: "boom\n", StdoutBytes: 1000, StderrBytes: 5,
		Seconds: 0.25, Notes: []string{"a note"}}
	structured := string(must(json.Marshal(out)))
	if strings.Contains(structured, "ooo") || strings.Contains(structured, "boom") {
		t.Errorf("the structured content has the output: %s", structured)
	}
	text := out.text()
	if strings.Count(text, strings.Repeat("o", 1000)) != 1 || !strings.Contains(text, "--- stderr ---\nboom\n") ||
		!strings.HasPrefix(text, "exit status 1 (exited) after 0.25s; stdout 1000 bytes, stderr 5 bytes\n") || !strings.HasSuffix(text, "--- notes ---\n- a note\n") {
		t.Errorf("exec's text:\n%s", text)
	}
	if got := (execOut{How: "exited", StdoutBytes: 1}).text(); !strings.Contains(got, "stdout 1 byte,") || strings.Contains(got, "---") {
		t.Errorf("a quiet command's text: %q", got)
	}
}

// logs's output is in its text once too; a listing of processes is its
// JSON.
func TestLogsOutputComesOnce(t *testing.T) {
	out := logsOut{Output: "started\nda", Bytes: 10, Next: 10}
	if structured := string(must(json.Marshal(out))); strings.Contains(structured, "started") {
		t.Errorf("the structured content has the output: %s", structured)
	}
	if text := out.text(); text != "10 bytes of output; next_offset 10; it still runs\n--- output ---\nstarted\nda\n" {
		t.Errorf("logs's text: %q", text)
	}
	if text := (logsOut{Processes: []processOut{}}).text(); text != "" {
		t.Errorf("a listing's text: %q; want its JSON (none here)", text)
	}
}

// file_read's content and diff's text are in the text once too.
func TestFileAndDiffTextComeOnce(t *testing.T) {
	read := readOut{Path: "a.txt", Content: "hello\nworld", Encoding: encodingUTF8, Offset: 4, Bytes: 11}
	if structured := string(must(json.Marshal(read))); strings.Contains(structured, "hello") {
		t.Errorf("file_read's structured content has the content: %s", structured)
	}
	if text := read.text(); text != "a.txt: 11 bytes from offset 4, utf-8; more follows: read on from offset 15\n--- content ---\nhello\nworld\n" {
		t.Errorf("file_read's text: %q", text)
	}
	diff := diffOut{Text: "--- a/x\n+++ b/x\n", Bytes: 16, Ignored: 1}
	if structured := string(must(json.Marshal(diff))); strings.Contains(structured, "a/x") {
		t.Errorf("diff's structured content has the diff: %s", structured)
	}
	if text := diff.text(); text != "a unified diff of 16 bytes; 1 changed path left out by the project's ignore rules (.sandboxignore)\n--- diff ---\n--- a/x\n+++ b/x\n" {
		t.Errorf("diff's text: %q", text)
	}
	if text := (diffOut{Changes: []changeEntry{}}).text(); text != "" {
		t.Errorf("a list of changes' text: %q; want its JSON", text)
	}
}

// The network's note is for output that shows a network failure only.
func TestNetworkFailureIsReadFromTheOutput(t *testing.T) {
	for out, want := range map[string]bool{
		"curl: (6) Could not resolve host: example.com":                          true,
		"ssh: connect to host 10.0.0.1 port 22: Network is unreachable":          true,
		"Temporary failure in name resolution":                                   true,
		"curl: (7) Failed to connect to 127.0.0.1 port 9: Connection refused":    true,
		"dial tcp: lookup proxy.golang.org: no such host":                        true,
		"AssertionError: add(2, 3) gave -1":                                      false,
		"":                                                                       false,
		"FAIL: test_proxy_settings (tests.TestConfig)\nAssertionError: 1 != 2\n": false,
	} {
		if got := networkFailure(out); got != want {
			t.Errorf("networkFailure(%q) = %v; want %v", out, got, want)
		}
	}
}

// An ELF is not text, though it may be valid UTF-8: file_read gives it
// as base64; text with tabs and colours stays text.
func TestBinaryFilesAreBase64(t *testing.T) {
	elf, err := os.ReadFile("/bin/true")
	if err != nil {
		t.Fatal(err)
	}
	content, enc := fileText(elf)
	if enc != encodingBase64 || content != base64.StdEncoding.EncodeToString(elf) {
		t.Errorf("/bin/true read as %s", enc)
	}
	// NUL and other control bytes in valid UTF-8.
	if _, enc := fileText([]byte("ELF\x00\x01\x02")); enc != encodingBase64 {
		t.Errorf("valid UTF-8 with NULs read as %s", enc)
	}
	text := "a\tb\r\n\x1b[31mred\x1b[0m\f\bé\n"
	if content, enc := fileText([]byte(text)); enc != encodingUTF8 || content != text {
		t.Errorf("text read as %s %q", enc, content)
	}
}

// With the daemon down, the server lists its tools, and each call says
// sandboxd is not running and how to start it; the next call tries again.
func TestDaemonDownEachCallSaysHowToStartIt(t *testing.T) {
	var tries atomic.Int32
	down := func(context.Context) (*client.Client, error) {
		tries.Add(1)
		return nil, errors.New("connecting to the system bus: dial unix /run/dbus/system_bus_socket: connect: no such file or directory")
	}
	cs := connectWith(t, Options{Connect: down})
	n := 0
	for _, err := range cs.Tools(t.Context(), nil) {
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n < len(wantHints) || tries.Load() != 0 {
		t.Errorf("%d tools listed, %d connections tried; want %d tools and none tried", n, tries.Load(), len(wantHints))
	}
	for i, call := range []mcp.CallToolParams{
		{Name: "sandbox_list", Arguments: map[string]any{}},
		{Name: "exec", Arguments: map[string]any{"sandbox": "x", "shell": "true"}},
	} {
		res, err := cs.CallTool(t.Context(), &call)
		if err != nil {
			t.Fatal(err)
		}
		text := resultText(res)
		if !res.IsError || !strings.Contains(text, "sandboxd is not running") || !strings.Contains(text, "systemctl start sandboxd") ||
			!strings.Contains(text, "system_bus_socket") {
			t.Errorf("%s with the daemon down: IsError %v, %q", call.Name, res.IsError, text)
		}
		if got := tries.Load(); got != int32(i+1) {
			t.Errorf("after %d calls, %d connections tried", i+1, got)
		}
	}
}

// stdin is what a client sends; eof is closed once the server read its
// end.
type stdin struct {
	io.Reader
	eof chan struct{}
}

func (s *stdin) Read(p []byte) (int, error) {
	n, err := s.Reader.Read(p)
	if err == io.EOF {
		select {
		case <-s.eof:
		default:
			close(s.eof)
		}
	}
	return n, err
}

func (s *stdin) Close() error { return nil }

type stdout struct{ io.WriteCloser }

func newStdin(lines ...string) *stdin {
	return &stdin{Reader: strings.NewReader(strings.Join(lines, "\n") + "\n"), eof: make(chan struct{})}
}

// serveLines serves in on stdio to a server whose connection to the
// daemon is connect, and returns its answers, by id, once it ended.
func serveLines(t *testing.T, connect func(context.Context) (*client.Client, error), in *stdin) map[string]map[string]any {
	t.Helper()
	r, w := io.Pipe()
	served := make(chan error, 1)
	go func() {
		served <- serveStdio(t.Context(), nil, Options{Connect: connect}, in, stdout{w})
		w.Close()
	}()
	answers := map[string]map[string]any{}
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 4<<20)
	for sc.Scan() {
		var msg map[string]any
		if err := json.Unmarshal(sc.Bytes(), &msg); err != nil {
			t.Fatalf("an answer that is not JSON: %q", sc.Text())
		}
		if id, ok := msg["id"]; ok {
			answers[string(must(json.Marshal(id)))] = msg
		}
	}
	if err := <-served; err != nil {
		t.Errorf("serving stdio: %v", err)
	}
	return answers
}

// answer is the result of the answer with id, or fails the test.
func answer(t *testing.T, answers map[string]map[string]any, id string) map[string]any {
	t.Helper()
	a, ok := answers[id]
	if !ok {
		t.Fatalf("no answer to request %s; answers: %v", id, answers)
	}
	res, ok := a["result"].(map[string]any)
	if !ok {
		t.Fatalf("the answer to request %s is not a result: %v", id, a)
	}
	return res
}

// toolsIn counts the tools a tools/list result lists.
func toolsIn(res map[string]any) int {
	tools, _ := res["tools"].([]any)
	return len(tools)
}

// callText is a tools/call result's text, and whether it is an error.
func callText(res map[string]any) (string, bool) {
	var b strings.Builder
	content, _ := res["content"].([]any)
	for _, c := range content {
		if m, ok := c.(map[string]any); ok && m["type"] == "text" {
			b.WriteString(m["text"].(string))
		}
	}
	isErr, _ := res["isError"].(bool)
	return b.String(), isErr
}

// At the end of its input the server answers the calls under way, then
// ends cleanly: `sandboxctl mcp < requests.jsonl`. The call here is held
// until the server read the end of its input.
func TestStdioAnswersTheCallsUnderWayAtTheEndOfInput(t *testing.T) {
	in := newStdin(
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"jsonl","version":"1"}}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`,
		`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"sandbox_list","arguments":{}}}`,
	)
	connect := func(ctx context.Context) (*client.Client, error) {
		select {
		case <-in.eof:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return nil, errors.New("the bus is down")
	}
	answers := serveLines(t, connect, in)
	if v := answer(t, answers, "1")["protocolVersion"]; v != "2025-06-18" {
		t.Errorf("initialize answered protocol version %v", v)
	}
	if n := toolsIn(answer(t, answers, "2")); n < len(wantHints) {
		t.Errorf("tools/list listed %d tools", n)
	}
	if text, isErr := callText(answer(t, answers, "3")); !isErr || !strings.Contains(text, "the bus is down") || !strings.Contains(text, "systemctl start sandboxd") {
		t.Errorf("the call under way at the end of input: IsError %v, %q; want the daemon's error", isErr, text)
	}
}

// The two newest revisions, over stdio in raw JSON-RPC: 2026-07-28 (no
// initialize: server/discover, the version in each request's _meta) and
// 2025-11-25 (initialize first).
func TestStdioServesTheTwoNewestRevisions(t *testing.T) {
	down := func(context.Context) (*client.Client, error) { return nil, errors.New("the bus is down") }
	meta := `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"raw","version":"1"}}`
	modern := serveLines(t, down, newStdin(
		`{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{`+meta+`}}`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{`+meta+`}}`,
		`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{`+meta+`,"name":"exec","arguments":{"sandbox":"x","shell":"true"}}}`,
	))
	versions := fmt.Sprint(answer(t, modern, "1")["supportedVersions"])
	if !strings.Contains(versions, "2026-07-28") || !strings.Contains(versions, "2025-11-25") {
		t.Errorf("server/discover: supported versions %s", versions)
	}
	if n := toolsIn(answer(t, modern, "2")); n < len(wantHints) {
		t.Errorf("2026-07-28 tools/list listed %d tools", n)
	}
	if text, isErr := callText(answer(t, modern, "3")); !isErr || !strings.Contains(text, "systemctl start sandboxd") {
		t.Errorf("2026-07-28 tools/call: IsError %v, %q", isErr, text)
	}

	legacy := serveLines(t, down, newStdin(
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`,
		`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"sandbox_create","arguments":{"project":"web","ttl_minutes":"abc"}}}`,
	))
	if v := answer(t, legacy, "1")["protocolVersion"]; v != "2025-11-25" {
		t.Errorf("initialize with 2025-11-25 answered %v", v)
	}
	if n := toolsIn(answer(t, legacy, "2")); n < len(wantHints) {
		t.Errorf("2025-11-25 tools/list listed %d tools", n)
	}
	if text, isErr := callText(answer(t, legacy, "3")); !isErr || !strings.Contains(text, `ttl_minutes: want an integer, got the string "abc"`) {
		t.Errorf("2025-11-25 tools/call: IsError %v, %q", isErr, text)
	}
}
