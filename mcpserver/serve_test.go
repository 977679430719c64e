package mcpserver

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func TestListenRefusesAllButLoopbackAndUnixSockets(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", ":0", "[::]:0", "192.0.2.1:8080", "example.com:80", "127.0.0.1"} {
		if l, _, err := Listen(addr); err == nil {
			l.Close()
			t.Errorf("Listen(%q) listened", addr)
		}
	}
	for _, addr := range []string{"127.0.0.1:0", "localhost:0"} {
		l, where, err := Listen(addr)
		if err != nil {
			t.Errorf("Listen(%q): %v", addr, err)
			continue
		}
		if ip := l.Addr().(*net.TCPAddr).IP; !ip.IsLoopback() || !strings.HasPrefix(where, "http://127.0.0.1:") || !strings.HasSuffix(where, HTTPPath) {
			t.Errorf("Listen(%q) on %s, said %q", addr, ip, where)
		}
		l.Close()
	}
}

func TestListenOnAUnixSocketIsItsUsersOnly(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "mcp.sock")
	l, _, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the socket: %v, %v; want a socket, mode 0600", fi.Mode(), err)
	}
	// A server listens there: a second is refused.
	if l2, _, err := Listen(path); err == nil || !strings.Contains(err.Error(), "listens there already") {
		if l2 != nil {
			l2.Close()
		}
		t.Errorf("a second Listen on a live socket: %v", err)
	}
	// A socket left behind is replaced.
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close()
	l, _, err = Listen(path)
	if err != nil {
		t.Fatalf("Listen over a stale socket: %v", err)
	}
	l.Close()
	// Any other file is left alone.
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Listen(file); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Errorf("Listen on a regular file: %v", err)
	}
	if b, _ := os.ReadFile(file); string(b) != "keep" {
		t.Errorf("the file was changed: %q", b)
	}
}

// bearer is an http.RoundTripper that adds a bearer token.
type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// Over HTTP, a request without the token, or with another, gets 401; a
// client with it is served. (No daemon: listing tools asks none.)
func TestServeHTTPRequiresTheToken(t *testing.T) {
	if err := ServeHTTP(t.Context(), nopListener{}, "", nil, Options{}); err == nil {
		t.Error("ServeHTTP served without a token")
	}
	l, url, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	served := make(chan error, 1)
	go func() { served <- ServeHTTP(ctx, l, "s3cret", nil, Options{}) }()
	defer func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("ServeHTTP: %v", err)
		}
	}()
	for _, token := range []string{"", "wrong"} {
		req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("a request with token %q: %s; want 401", token, resp.Status)
		}
	}
	transport := &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: bearer{"s3cret"}}}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(ctx, transport, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	n := 0
	for _, err := range cs.Tools(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n != len(wantHints) {
		t.Errorf("%d tools over HTTP; want %d", n, len(wantHints))
	}
}

// nopListener is a listener ServeHTTP must not serve on.
type nopListener struct{ net.Listener }

func (nopListener) Close() error { return nil }
