package integration

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Bad input to `sandboxctl mcp`, refused networks, and clients that
// cancel or go away.

// TestMCPBadInput: unknown tools and arguments, a path to a host file
// through a symlink or "..", files over the cap, binary output and an
// exec printing a gigabyte are clear errors or results, and the server
// carries on after each.
func TestMCPBadInput(t *testing.T) {
	install(t)
	id := sandbox(t)
	cs, _, _ := mcpSession(t)
	ctx := context.Background()

	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "approve", Arguments: map[string]any{}}); err == nil {
		t.Error("an unknown tool was called")
	}
	toolFails(t, cs, "exec", map[string]any{"sandbox": id, "command": []string{"true"}, "as_user": "root"}, `as_user`)
	toolFails(t, cs, "exec", map[string]any{"sandbox": "no-such-sandbox", "command": []string{"true"}}, `no sandbox is called or starts with "no-such-sandbox"`)
	toolFails(t, cs, "exec", map[string]any{"sandbox": id, "command": []string{"true"}, "timeout_seconds": 86400}, `over the most`)

	// A root-only host file the sandbox does not see (/var/log is
	// hidden in sandboxes): root reads it on the host (the control); the
	// file tools reach it by no path.
	secret := "/var/log/sandboxd-mcp-secret-" + suffix()
	if err := os.WriteFile(secret, []byte("mcp secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(secret) })
	if b, err := os.ReadFile(secret); err != nil || string(b) != "mcp secret" {
		t.Fatalf("control: reading %s on the host: %q, %v", secret, b, err)
	}
	ok(t, "exec", id, "--", "ln", "-s", secret, "to-secret")
	for _, p := range []string{"to-secret", secret, "../../../../../../.." + secret, "/proc/1/root" + secret} {
		if text := toolFails(t, cs, "file_read", map[string]any{"sandbox": id, "path": p}, `.`); strings.Contains(text, "mcp secret") {
			t.Errorf("file_read %s read the host's secret", p)
		}
	}
	// Written through the symlink, the file is the sandbox's own, if any.
	callTool(t, cs, "file_write", map[string]any{"sandbox": id, "path": "to-secret", "content": "overwritten"})
	if b, _ := os.ReadFile(secret); string(b) != "mcp secret" {
		t.Errorf("the host's secret after file_write through a symlink: %q", b)
	}

	// Files over the cap: refused whole, saying how to read them; a part
	// of one is read (base64: not text).
	ok(t, "exec", id, "--", "sh", "-c", "head -c 2M /dev/urandom > big.bin")
	toolFails(t, cs, "file_read", map[string]any{"sandbox": id, "path": "big.bin"}, `larger than 1048576 bytes[^\n]*\n\(read it in parts`)
	var part struct {
		Encoding string
		Bytes    int
		EOF      bool
	}
	toolOK(t, cs, "file_read", map[string]any{"sandbox": id, "path": "big.bin", "offset": 1 << 20, "max_bytes": 4096}, &part)
	if part.Encoding != "base64" || part.Bytes != 4096 || part.EOF {
		t.Errorf("a part of big.bin: %+v", part)
	}
	toolFails(t, cs, "file_write", map[string]any{"sandbox": id, "path": "huge.txt", "content": strings.Repeat("x", 1<<20+1)}, `over the 1048576 a call may write`)

	// Binary output is returned as valid text, said to be binary.
	var run mcpExec
	toolOK(t, cs, "exec", map[string]any{"sandbox": id, "command": []string{"printf", `ok\377\376\n`}}, &run)
	if run.Stdout != "ok\uFFFD\n" || len(run.Notes) != 1 || !strings.Contains(run.Notes[0], "not UTF-8") {
		t.Errorf("binary output: %+v", run)
	}

	// A gigabyte of output: the command is ended at the output limit,
	// soon, and the result says so with what it kept.
	start := time.Now()
	toolOK(t, cs, "exec", map[string]any{"sandbox": id, "command": []string{"head", "-c", "1G", "/dev/zero"}}, &run)
	took := time.Since(start)
	if run.How != "output-limit" || run.StdoutBytes < 32<<20 || run.StdoutBytes > 64<<20 || len(run.Stdout) > 70<<10 ||
		!strings.Contains(strings.Join(run.Notes, "\n"), "output limit") || !strings.Contains(run.Stdout, "bytes cut here") {
		t.Errorf("1 GB of output: how %s, %d bytes, %d kept, notes %q", run.How, run.StdoutBytes, len(run.Stdout), run.Notes)
	}
	if took > 30*time.Second {
		t.Errorf("1 GB of output took %v to end", took)
	}
	t.Logf("1 GB of output ended after %d bytes, in %v", run.StdoutBytes, took)
	alive(t, id, "after the exec tool's bad input")
}

// TestMCPNetworkRefusalsSayRetryingWillNotHelp: a command that failed in
// a sandbox whose network is none or an allowlist gets a note naming the
// policy; the allowlist's proxy says what it refused, and that retrying
// will not help.
func TestMCPNetworkRefusalsSayRetryingWillNotHelp(t *testing.T) {
	install(t)
	none := sandbox(t, "--network", "none")
	allow := sandbox(t, "--network", "allowlist", "--allow", "127.0.0.1:9")
	cs, _, _ := mcpSession(t)
	curl := []string{"curl", "-sS", "--max-time", "20", "--fail-with-body", "http://192.0.2.1/"}

	var run mcpExec
	toolOK(t, cs, "exec", map[string]any{"sandbox": none, "command": curl}, &run)
	if run.ExitCode == 0 || len(run.Notes) != 1 || !strings.Contains(run.Notes[0], `network is "none"`) || !strings.Contains(run.Notes[0], "retrying will not help") {
		t.Errorf("curl in a sandbox without network: %+v", run)
	}
	toolOK(t, cs, "exec", map[string]any{"sandbox": allow, "command": curl}, &run)
	if run.ExitCode != 22 || !strings.Contains(run.Stdout, "refused 192.0.2.1:80") || !strings.Contains(run.Stdout, "retrying will not help") {
		t.Errorf("curl through the allowlist's proxy: %+v; want its 403 saying what was refused and that retrying will not help", run)
	}
	if len(run.Notes) != 1 || !strings.Contains(run.Notes[0], `network is "allowlist": it reaches only 127.0.0.1:9`) {
		t.Errorf("the note of a failed command behind an allowlist: %q", run.Notes)
	}
	// A command that succeeds gets no note.
	toolOK(t, cs, "exec", map[string]any{"sandbox": none, "command": []string{"true"}}, &run)
	if len(run.Notes) != 0 {
		t.Errorf("true in a sandbox without network: notes %q", run.Notes)
	}
}

// TestMCPCancelledCallKillsTheCommand: the client cancels an exec while
// it runs `sleep` (the SDK tells the server); the sleep is killed, and
// the server goes on serving.
func TestMCPCancelledCallKillsTheCommand(t *testing.T) {
	install(t)
	id := sandbox(t)
	cs, _, _ := mcpSession(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "exec",
			Arguments: map[string]any{"sandbox": id, "command": []string{"sleep", "298.5"}}})
		done <- err
	}()
	// The control: the sleep runs.
	waitFor(t, "the sleep to run", func() bool { return strings.Contains(sandboxCmdlines(t, id), "sleep 298.5") })
	cancel()
	if err := <-done; err == nil {
		t.Error("the cancelled exec call returned a result")
	}
	waitFor(t, "the sleep to be killed", func() bool { return !strings.Contains(sandboxCmdlines(t, id), "sleep 298.5") })
	var run mcpExec
	toolOK(t, cs, "exec", map[string]any{"sandbox": id, "command": []string{"echo", "still here"}}, &run)
	if run.Stdout != "still here\n" {
		t.Errorf("exec after a cancelled one: %+v", run)
	}
}

// TestMCPDisconnectKillsTheCommand: the client goes away (its pipes
// close, as when it crashes) while an exec runs `sleep`; the server
// kills the sleep, closes the REPL session it opened and ends on its
// own: nothing is left running in the sandbox.
func TestMCPDisconnectKillsTheCommand(t *testing.T) {
	install(t)
	id := sandbox(t)
	cmd := exec.Command(ctlBin(), "mcp")
	stderr := &lockedBuffer{}
	cmd.Stderr = stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		select {
		case <-exited:
		default:
			cmd.Process.Kill()
			<-exited
		}
	})
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "integration-test"}, nil).Connect(context.Background(),
		&mcp.IOTransport{Reader: stdout, Writer: stdin}, nil)
	if err != nil {
		t.Fatal(err)
	}

	var repl struct {
		Output string
		Status int
	}
	toolOK(t, cs, "repl", map[string]any{"sandbox": id, "language": "python3", "code": "x = 41"}, &repl)
	toolOK(t, cs, "repl", map[string]any{"sandbox": id, "language": "python3", "code": "print(x + 1)"}, &repl)
	if repl.Output != "42\n" || repl.Status != 0 {
		t.Fatalf("repl: %+v; want 42, the session kept between calls", repl)
	}
	go cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "exec",
		Arguments: map[string]any{"sandbox": id, "command": []string{"sleep", "299.5"}}})
	// The control: the sleep runs, and the interpreter.
	waitFor(t, "the sleep to run", func() bool { return strings.Contains(sandboxCmdlines(t, id), "sleep 299.5") })
	if !strings.Contains(sandboxCmdlines(t, id), "python3") {
		t.Fatalf("no interpreter runs in the sandbox:\n%s", sandboxCmdlines(t, id))
	}
	start := time.Now()
	stdin.Close()
	stdout.Close()
	select {
	case <-exited:
	case <-time.After(15 * time.Second):
		t.Fatalf("sandboxctl mcp still runs 15s after its client went away\n%s", stderr)
	}
	if !cmd.ProcessState.Exited() {
		t.Errorf("sandboxctl mcp after its client went away: %v; want it to end on its own\n%s", cmd.ProcessState, stderr)
	}
	t.Logf("sandboxctl mcp ended %v after its client went away: %v", time.Since(start), cmd.ProcessState)
	procs := sandboxCmdlines(t, id)
	if strings.Contains(procs, "sleep 299.5") || strings.Contains(procs, "python3") {
		t.Errorf("left running in the sandbox after the client went away:\n%s", procs)
	}
}
