package integration

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// `sandboxctl mcp --http`: the streamable HTTP transport behind a bearer
// token.

// unixClient is an http.Client that reaches a unix socket whatever the
// URL's host, sending token as its bearer token when it is not "".
func unixClient(socket, token string) *http.Client {
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", socket)
	}}
	return &http.Client{Transport: bearerTransport{token, tr}}
}

type bearerTransport struct {
	token string
	next  http.RoundTripper
}

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if b.token != "" {
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "Bearer "+b.token)
	}
	return b.next.RoundTrip(r)
}

// startHTTPMCP starts `sandboxctl mcp --http addr` with env and reads
// from its stderr where it serves and, if it made one, its token.
func startHTTPMCP(t *testing.T, addr string, env ...string) (cmd *exec.Cmd, where, token string) {
	t.Helper()
	cmd = exec.Command(ctlBin(), "mcp", "--http", addr)
	cmd.Env = append(os.Environ(), env...)
	pipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	lines := bufio.NewScanner(pipe)
	for lines.Scan() {
		line := lines.Text()
		if w, ok := strings.CutPrefix(line, "sandboxctl mcp: serving MCP over HTTP on "); ok {
			where = w
		}
		if tok, ok := strings.CutPrefix(line, "sandboxctl mcp: bearer token (clients send Authorization: Bearer TOKEN): "); ok {
			token = tok
		}
		if where != "" && (token != "" || len(env) > 0) {
			break
		}
	}
	if where == "" {
		t.Fatalf("sandboxctl mcp --http %s said nowhere it serves", addr)
	}
	go io.Copy(io.Discard, pipe)
	return cmd, where, token
}

// TestMCPOverHTTPNeedsTheToken: over loopback TCP and over a unix socket
// (made 0600), a request without the bearer token gets 401, the SDK's
// client with it lists the tools and calls one; an address off loopback
// is refused; SIGTERM ends the server and removes its socket.
func TestMCPOverHTTPNeedsTheToken(t *testing.T) {
	install(t)
	if _, errOut, code := ctl(t, "", "mcp", "--http", "0.0.0.0:0"); code != 2 || !strings.Contains(errOut, "only a loopback address") {
		t.Errorf("mcp --http 0.0.0.0:0: exit %d, %q; want it refused", code, errOut)
	}

	// Loopback TCP, the token from the environment.
	token := "tcp-token-" + suffix()
	_, url, printed := startHTTPMCP(t, "127.0.0.1:0", "SANDBOXD_MCP_TOKEN="+token)
	if printed != "" || !strings.HasPrefix(url, "http://127.0.0.1:") {
		t.Fatalf("serving on %q, token %q printed; want a loopback URL, no token printed", url, printed)
	}
	for _, tok := range []string{"", "not-" + token} {
		resp, err := (&http.Client{Transport: bearerTransport{tok, http.DefaultTransport}}).Post(url, "application/json",
			strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("a request with token %q: %s; want 401", tok, resp.Status)
		}
	}
	mcpOverHTTP(t, url, &http.Client{Transport: bearerTransport{token, http.DefaultTransport}})

	// A unix socket, the token made and printed.
	socket := filepath.Join(t.TempDir(), "mcp.sock")
	cmd, where, token := startHTTPMCP(t, socket)
	if len(token) != 64 || where != "unix:"+socket+" (path /mcp)" {
		t.Fatalf("serving on %q with token %q", where, token)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(socket, &st); err != nil || st.Mode&0o777 != 0o600 || st.Uid != uint32(os.Getuid()) {
		t.Fatalf("the socket: mode %o, owner %d, %v; want 0600, the caller's", st.Mode&0o777, st.Uid, err)
	}
	resp, err := unixClient(socket, "").Post("http://mcp/mcp", "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a request on the socket without the token: %s; want 401", resp.Status)
	}
	mcpOverHTTP(t, "http://localhost/mcp", unixClient(socket, token))
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Errorf("sandboxctl mcp --http after SIGTERM: %v", err)
	}
	if _, err := os.Stat(socket); !os.IsNotExist(err) {
		t.Errorf("the socket after the server ended: %v; want it gone", err)
	}
}

// mcpOverHTTP connects the SDK's client to url through hc, lists the
// tools and calls sandbox_list, which asks the daemon.
func mcpOverHTTP(t *testing.T, url string, hc *http.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "integration-test"}, nil).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: url, HTTPClient: hc}, nil)
	if err != nil {
		t.Fatalf("connecting to %s: %v", url, err)
	}
	defer cs.Close()
	names := map[string]bool{}
	for tool, err := range cs.Tools(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		names[tool.Name] = true
	}
	if !names["exec"] || !names["promote"] || !names["sandbox_create"] {
		t.Errorf("tools over HTTP at %s: %v", url, names)
	}
	var list struct{ Projects []struct{ Name string } }
	toolOK(t, cs, "sandbox_list", map[string]any{}, &list)
	if !strings.Contains(fmt.Sprint(list.Projects), "web") {
		t.Errorf("sandbox_list over HTTP: projects %v; want web among them", list.Projects)
	}
	// The current revision, 2026-07-28, with no initialize: the version
	// and capabilities in the request's _meta.
	meta := `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"integration-test","version":"1"}}`
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(
		`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{`+meta+`,"name":"sandbox_list","arguments":{}}}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", "tools/call")
	req.Header.Set("Mcp-Name", "sandbox_list")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"web"`) || strings.Contains(string(body), `"error"`) {
		t.Errorf("sandbox_list over HTTP in MCP 2026-07-28: %s: %s", resp.Status, body)
	}
}
