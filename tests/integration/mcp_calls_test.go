package integration

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/tests/testbed"
)

// The MCP calls a generic client makes (issue 33): a shell line, output
// once with a cap of the call's, the daemon down and back, and a file of
// requests on stdin.

// TestMCPExecShellOutputOnceAndItsCap: exec and spawn take a shell line;
// exec's output is in the result once (a command writing 100 MB comes
// back in about the server's cap, not twice it); max_output_bytes keeps
// less; a failure that is not the network's gets no network note.
func TestMCPExecShellOutputOnceAndItsCap(t *testing.T) {
	install(t)
	id := sandbox(t, "--network", "none")
	cs, _, _ := mcpSession(t)

	var run mcpExec
	toolOK(t, cs, "exec", map[string]any{"sandbox": id, "shell": "echo $((6*7)) | tr 4 X; echo oops >&2; exit 3"}, &run)
	if run.ExitCode != 3 || run.Stdout != "X2\n" || run.Stderr != "oops\n" {
		t.Errorf("exec of a shell line: %+v", run)
	}
	if len(run.Notes) != 0 {
		t.Errorf("exit 3 of a shell line in a sandbox without network: notes %q; want none (the output shows no network failure)", run.Notes)
	}
	toolFails(t, cs, "exec", map[string]any{"sandbox": id, "command": []string{"true"}, "shell": "true"}, "both command and shell")

	// 100 MB of output: ended at the output limit, its result about the cap.
	res := callTool(t, cs, "exec", map[string]any{"sandbox": id, "shell": "head -c 100000000 /dev/zero | tr '\\0' x"})
	wire, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	text := toolText(res)
	structured, _ := json.Marshal(res.StructuredContent)
	if strings.Contains(string(structured), "xxxx") {
		t.Errorf("100 MB of output: the output is not in the text alone: structured %s", structured)
	}
	if len(wire) > 70<<10 || !strings.Contains(text, "bytes cut here") {
		t.Errorf("100 MB of output: a result of %d bytes; want about the server's cap (64 KiB)", len(wire))
	}
	// Before: the output twice, in structuredContent and again as its JSON text.
	stdout, _ := execSections(text)
	var m map[string]any
	json.Unmarshal(structured, &m)
	m["stdout"], m["stderr"] = stdout, ""
	old, _ := json.Marshal(m)
	t.Logf("100 MB of output: a result of %d bytes on the wire (%d bytes of structured content); as it was, with the output twice: about %d bytes",
		len(wire), len(structured), 2*len(old))

	// max_output_bytes keeps less, said in the counts.
	var small struct {
		StdoutBytes int64 `json:"stdout_bytes"`
		StdoutCut   int64 `json:"stdout_cut_bytes"`
	}
	toolOK(t, cs, "exec", map[string]any{"sandbox": id, "shell": "seq 100000", "max_output_bytes": 1000}, &small)
	res = callTool(t, cs, "exec", map[string]any{"sandbox": id, "shell": "seq 100000", "max_output_bytes": 1000})
	if stdout, _ := execSections(toolText(res)); len(stdout) > 1100 || !strings.HasPrefix(stdout, "1\n2\n") || !strings.HasSuffix(stdout, "99999\n100000\n") ||
		small.StdoutBytes != 588895 || small.StdoutCut < 587000 {
		t.Errorf("seq 100000 with max_output_bytes 1000: %d bytes kept, %+v", len(stdout), small)
	}

	// spawn takes a shell line too.
	var spawned struct {
		Process string `json:"process"`
	}
	toolOK(t, cs, "spawn", map[string]any{"sandbox": id, "shell": "echo spawned | tr a-z A-Z"}, &spawned)
	var logs mcpLogs
	waitFor(t, "the spawned shell line to end", func() bool {
		toolOK(t, cs, "logs", map[string]any{"sandbox": id, "process": spawned.Process}, &logs)
		return logs.Ended
	})
	if logs.Output != "SPAWNED\n" {
		t.Errorf("spawn of a shell line: %q", logs.Output)
	}
}

// TestMCPDaemonDownAndBack: `sandboxctl mcp` started while the daemon is
// stopped answers initialize and lists its tools; a call says the daemon
// is not running and how to start it; once it is started (and after it
// restarts) the same session's calls work.
func TestMCPDaemonDownAndBack(t *testing.T) {
	install(t)
	testbed.MustRun(t, "systemctl", "stop", "sandboxd.service")
	t.Cleanup(func() { testbed.MustRun(t, "systemctl", "start", "sandboxd.service") })
	cs, _, stderr := mcpSession(t)
	n := 0
	for _, err := range cs.Tools(t.Context(), nil) {
		if err != nil {
			t.Fatalf("tools/list with the daemon stopped: %v\n%s", err, stderr)
		}
		n++
	}
	if n < 20 {
		t.Errorf("%d tools listed with the daemon stopped", n)
	}
	toolFails(t, cs, "sandbox_list", map[string]any{}, `(?s)not running.*systemctl start sandboxd`)
	testbed.MustRun(t, "systemctl", "start", "sandboxd.service")
	var list struct {
		Projects []struct{ Name string } `json:"projects"`
	}
	toolOK(t, cs, "sandbox_list", map[string]any{}, &list)
	if len(list.Projects) == 0 {
		t.Errorf("sandbox_list once the daemon started: %+v", list)
	}
	testbed.MustRun(t, "systemctl", "restart", "sandboxd.service")
	toolOK(t, cs, "sandbox_list", map[string]any{}, &list)
}

// TestMCPRequestsFromAFile: `sandboxctl mcp < requests.jsonl` prints an
// answer to each request, the exec under way at the end of its input
// too, and exits 0.
func TestMCPRequestsFromAFile(t *testing.T) {
	install(t)
	id := sandbox(t)
	lines := []string{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"jsonl","version":"1"}}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`,
		`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"exec","arguments":{"sandbox":"` + id + `","shell":"sleep 1; echo slept"}}}`,
		`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"exec","arguments":{"sandbox":"` + id + `","command":["echo","argv"]}}}`,
	}
	file := filepath.Join(t.TempDir(), "requests.jsonl")
	if err := os.WriteFile(file, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	in, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	cmd := exec.Command(ctlBin(), "mcp")
	var out, errOut bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = in, &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("sandboxctl mcp < requests.jsonl: %v\n%s", err, errOut.String())
	}
	answers := map[float64]*mcp.CallToolResult{}
	got := map[float64]bool{}
	sc := bufio.NewScanner(&out)
	sc.Buffer(nil, 4<<20)
	for sc.Scan() {
		var msg struct {
			ID     float64         `json:"id"`
			Result json.RawMessage `json:"result"`
		}
		if err := json.Unmarshal(sc.Bytes(), &msg); err != nil {
			t.Fatalf("an answer that is not JSON: %q", sc.Text())
		}
		got[msg.ID] = true
		var res mcp.CallToolResult
		if json.Unmarshal(msg.Result, &res) == nil {
			answers[msg.ID] = &res
		}
	}
	for _, id := range []float64{1, 2, 3, 4} {
		if !got[id] {
			t.Errorf("no answer to request %v:\n%s", id, out.String())
		}
	}
	if res := answers[3]; res == nil || !strings.Contains(toolText(res), "--- stdout ---\nslept\n") {
		t.Errorf("the exec under way at the end of input: %+v", res)
	}
	if res := answers[4]; res == nil || !strings.Contains(toolText(res), "--- stdout ---\nargv\n") {
		t.Errorf("exec of an argv: %+v", res)
	}
}
