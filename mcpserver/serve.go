package mcpserver

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/client"
)

// ServeStdio serves MCP on stdin and stdout, one client, until it closes
// its end or ctx ends. At the end of stdin the calls under way are
// answered first (`sandboxctl mcp < requests.jsonl` prints each answer),
// unless the reader of stdout went away; calls still under way then end
// (an exec's command is killed) and the REPL sessions it opened are
// closed before it returns.
func ServeStdio(ctx context.Context, c *client.Client, opts Options) error {
	return serveStdio(ctx, c, opts, os.Stdin, os.Stdout)
}

func serveStdio(ctx context.Context, c *client.Client, opts Options, in io.ReadCloser, out io.WriteCloser) error {
	life, end := context.WithCancel(ctx)
	defer end()
	m, s := newServer(life, c, opts)
	err := m.Run(life, &drainingTransport{t: &mcp.IOTransport{Reader: in, Writer: out}, gone: readerGone(out)})
	end()
	s.repl.closeAll()
	s.c.close()
	if ctx.Err() != nil {
		return nil // told to stop: a clean end
	}
	if err != nil {
		return fmt.Errorf("serving MCP on stdin and stdout: %w", err)
	}
	return nil
}

// HTTPPath is where ServeHTTP serves MCP.
const HTTPPath = "/mcp"

// Listen opens where ServeHTTP serves: a unix socket at a path (one
// with a "/"; made 0600, so that only its user may connect), or a
// loopback TCP address, host:port ("127.0.0.1:0" picks a free port).
// Any other address is refused: the server acts as its user, and must
// not be reachable from another host. where names it, as a URL for TCP.
func Listen(addr string) (l net.Listener, where string, err error) {
	if strings.Contains(addr, "/") {
		return listenUnix(addr)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, "", fmt.Errorf("MCP address %q is neither a unix socket's path (with a /) nor host:port: %w", addr, err)
	}
	if host == "localhost" {
		host = "127.0.0.1"
	}
	ip, err := netip.ParseAddr(host)
	if err != nil || !ip.IsLoopback() {
		return nil, "", fmt.Errorf("MCP address %q: serving on %q is refused: the server acts as you, so only a loopback address (127.0.0.1, ::1, localhost) or a unix socket's path is allowed",
			addr, host)
	}
	l, err = net.Listen("tcp", net.JoinHostPort(ip.String(), port))
	if err != nil {
		return nil, "", fmt.Errorf("listening on %s for MCP: %w", addr, err)
	}
	return l, "http://" + l.Addr().String() + HTTPPath, nil
}

// listenUnix listens on a unix socket at path, made 0600 from the start:
// the process's umask is narrowed around the bind, so that no one else
// may connect even for a moment. A socket left by a server that ended is
// replaced; any other file there is refused.
func listenUnix(path string) (net.Listener, string, error) {
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, "", fmt.Errorf("listening on %s for MCP: it exists and is not a socket", path)
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, "", fmt.Errorf("listening on %s for MCP: a server listens there already", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, "", fmt.Errorf("removing the stale socket %s: %w", path, err)
		}
	}
	old := syscall.Umask(0o177)
	l, err := net.Listen("unix", path)
	syscall.Umask(old)
	if err != nil {
		return nil, "", fmt.Errorf("listening on %s for MCP: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return nil, "", fmt.Errorf("making %s 0600: %w", path, err)
	}
	return l, "unix:" + path + " (path " + HTTPPath + ")", nil
}

// ServeHTTP serves MCP's streamable HTTP transport on l, at HTTPPath,
// to clients that send token as their bearer token (others get 401),
// until ctx ends.
func ServeHTTP(ctx context.Context, l net.Listener, token string, c *client.Client, opts Options) error {
	if token == "" {
		l.Close()
		return errors.New("serving MCP over HTTP: no bearer token: a server anyone on this host could call is refused")
	}
	life, end := context.WithCancel(ctx)
	defer end()
	m, s := newServer(life, c, opts)
	mux := http.NewServeMux()
	// Stateless: each request is whole in itself, as MCP 2026-07-28 has
	// it (the SDK serves that revision only so); the earlier revisions'
	// clients are served too, each request on a session of its own. What
	// the tools keep between calls (REPL sessions) is the server's, not an
	// MCP session's, and a call's progress goes back on its own response.
	mux.Handle(HTTPPath, mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return m },
		&mcp.StreamableHTTPOptions{Stateless: true, Logger: opts.Logger}))
	verify := func(_ context.Context, got string, _ *http.Request) (*auth.TokenInfo, error) {
		if subtle.ConstantTimeCompare([]byte(got), []byte(token)) != 1 {
			return nil, fmt.Errorf("%w: not this server's token", auth.ErrInvalidToken)
		}
		return &auth.TokenInfo{}, nil
	}
	srv := &http.Server{
		Handler:           auth.RequireBearerToken(verify, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})(mux),
		ReadHeaderTimeout: 10 * time.Second,
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	var err error
	select {
	case err = <-served:
	case <-ctx.Done():
	}
	// Calls under way end with the server's life; their connections
	// close once they answered.
	end()
	shutdown, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if srv.Shutdown(shutdown) != nil {
		srv.Close()
	}
	s.repl.closeAll()
	s.c.close()
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serving MCP over HTTP on %s: %w", l.Addr(), err)
	}
	return nil
}
