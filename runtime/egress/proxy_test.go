package egress

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// logBuffer collects what a JSON slog handler writes, safely across the
// proxy's goroutines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// entries returns the records logged with message msg.
func (b *logBuffer) entries(t *testing.T, msg string) []map[string]any {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	for line := range strings.Lines(b.buf.String()) {
		var e map[string]any
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if e["msg"] == msg {
			out = append(out, e)
		}
	}
	return out
}

// startProxy serves p on a loopback port until the test ends, and returns
// the port's address with a cancel that stops Serve and a channel that
// receives Serve's result.
func startProxy(t *testing.T, p *Proxy) (addr string, logs *logBuffer, cancel context.CancelFunc, done <-chan error) {
	t.Helper()
	logs = &logBuffer{}
	if p.Log == nil {
		p.Log = slog.New(slog.NewJSONHandler(logs, nil))
	}
	if p.Sandbox == "" {
		p.Sandbox = "sb-test"
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	errc, finished := make(chan error, 1), make(chan struct{})
	go func() {
		errc <- p.Serve(ctx, ln)
		close(finished)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-finished:
		case <-time.After(5 * time.Second):
			t.Error("Serve did not return after its context ended")
		}
	})
	return ln.Addr().String(), logs, cancel, errc
}

// startEcho serves, on a loopback port, connections that send back what
// they get and close their writing side at its end.
func startEcho(t *testing.T) (addr string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.Copy(c, c)
				c.(*net.TCPConn).CloseWrite()
				io.Copy(io.Discard, c)
			}()
		}
	}()
	return ln.Addr().String()
}

// connect asks the proxy at proxy to CONNECT to target, and returns the
// connection, a reader of what follows the reply, and the reply.
func connect(t *testing.T, proxy, target string) (net.Conn, *bufio.Reader, *http.Response) {
	t.Helper()
	c, err := net.Dial("tcp", proxy)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("reading the reply to CONNECT %s: %v", target, err)
	}
	return c, br, resp
}

func body(t *testing.T, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func port(t *testing.T, addr string) int {
	t.Helper()
	_, p, _ := net.SplitHostPort(addr)
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func allow(t *testing.T, entries ...string) Allowlist {
	t.Helper()
	list, err := ParseAllowlist(entries)
	if err != nil {
		t.Fatal(err)
	}
	return list
}

func TestProxy(t *testing.T) {
	headers := make(chan http.Header, 10)
	srvA := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		headers <- r.Header
		fmt.Fprintf(w, "hello from A at %s", r.URL.Path)
	}))
	defer srvA.Close()
	srvB := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "hello from B")
	}))
	defer srvB.Close()
	addrA, addrB := srvA.Listener.Addr().String(), srvB.Listener.Addr().String()
	ruleA := "127.0.0.1:" + strconv.Itoa(port(t, addrA))

	proxy, logs, _, _ := startProxy(t, &Proxy{Allow: allow(t, ruleA), Sandbox: "sb1"})

	// CONNECT to A: a tunnel carrying an HTTP exchange both ways.
	c, br, resp := connect(t, proxy, addrA)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT %s: %s", addrA, resp.Status)
	}
	fmt.Fprintf(c, "GET /tunnel HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", addrA)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("reading A's response through the tunnel: %v", err)
	}
	if got := body(t, resp); got != "hello from A at /tunnel" {
		t.Errorf("through the tunnel: %q", got)
	}
	<-headers

	// CONNECT to B: refused.
	_, _, resp = connect(t, proxy, addrB)
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("CONNECT %s: %s, want 403", addrB, resp.Status)
	}
	if got := body(t, resp); !strings.Contains(got, addrB) || !strings.Contains(got, "not in this sandbox's allowlist") ||
		!strings.Contains(got, "retrying will not help") {
		t.Errorf("403 body %q does not say %s is not in the allowlist, and that retrying will not help", got, addrB)
	}

	// A plain GET to A, forwarded without its hop-by-hop and Proxy-* headers.
	c, err = net.Dial("tcp", proxy)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET http://%s/plain HTTP/1.1\r\nHost: %s\r\nProxy-Authorization: Basic eDp5\r\nProxy-Connection: keep-alive\r\nConnection: X-Hop\r\nX-Hop: 1\r\nX-Keep: 2\r\n\r\n", addrA, addrA)
	resp, err = http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("reading the forwarded response: %v", err)
	}
	if resp.StatusCode != http.StatusOK || body(t, resp) != "hello from A at /plain" {
		t.Errorf("forwarded GET: %s", resp.Status)
	}
	h := <-headers
	for _, name := range []string{"Proxy-Authorization", "Proxy-Connection", "X-Hop"} {
		if _, ok := h[name]; ok {
			t.Errorf("the origin got the header %s", name)
		}
	}
	if h.Get("X-Keep") != "2" {
		t.Errorf("the origin did not get X-Keep: %v", h)
	}

	// A plain GET to B, through net/http's own proxy support: refused.
	client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: proxy})}}
	resp, err = client.Get("http://" + addrB + "/")
	if err != nil {
		t.Fatal(err)
	}
	got := body(t, resp)
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(got, "refused "+addrB) ||
		!strings.Contains(got, "network policy") || !strings.Contains(got, "retrying will not help") {
		t.Errorf("GET B through the proxy: %s, %q; want 403 saying what was refused and that retrying will not help", resp.Status, got)
	}

	allowed := logs.entries(t, "egress allowed")
	if len(allowed) != 2 {
		t.Fatalf("%d egress allowed records, want 2 (CONNECT and GET): %v", len(allowed), allowed)
	}
	for i, method := range []string{"CONNECT", "GET"} {
		e := allowed[i]
		if e["rule"] != ruleA || e["target"] != addrA || e["SANDBOX_ID"] != "sb1" || e["ACTION"] != "connect" || e["method"] != method || e["level"] != "INFO" {
			t.Errorf("egress allowed record %v", e)
		}
	}
	refused := logs.entries(t, "egress refused")
	if len(refused) != 2 {
		t.Fatalf("%d egress refused records, want 2: %v", len(refused), refused)
	}
	for _, e := range refused {
		if e["target"] != addrB || e["SANDBOX_ID"] != "sb1" || e["ACTION"] != "connect" || e["rule"] != nil ||
			!strings.Contains(fmt.Sprint(e["reason"]), "not in this sandbox's allowlist") {
			t.Errorf("egress refused record %v", e)
		}
	}
}

func TestProxyBadRequests(t *testing.T) {
	proxy, logs, _, _ := startProxy(t, &Proxy{Allow: allow(t, "127.0.0.1:*")})
	tests := []struct{ request, want string }{
		{"GET /path HTTP/1.1\r\nHost: example.com\r\n\r\n", "400"},
		{"GET https://example.com/ HTTP/1.1\r\nHost: example.com\r\n\r\n", "400"},
		{"CONNECT example.com HTTP/1.1\r\nHost: example.com\r\n\r\n", "400"},
		{"CONNECT 127.0.0.1:0 HTTP/1.1\r\nHost: x\r\n\r\n", "400"},
		{"CONNECT 127.0.0.1:99999 HTTP/1.1\r\nHost: x\r\n\r\n", "400"},
		{"NONSENSE\r\n\r\n", "400"},
		{"GET http://example.com/ HTTP/1.1\r\nX-Big: " + strings.Repeat("x", maxHeaderBytes) + "\r\n\r\n", "431"},
	}
	for _, tc := range tests {
		c, err := net.Dial("tcp", proxy)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		go io.WriteString(c, tc.request)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("%.40q: %v", tc.request, err)
		}
		if got := strconv.Itoa(resp.StatusCode); got != tc.want {
			t.Errorf("%.40q: %s, want %s", tc.request, resp.Status, tc.want)
		}
		c.Close()
	}
	if n := len(logs.entries(t, "egress allowed")); n != 0 {
		t.Errorf("%d egress allowed records, want none", n)
	}
}

func TestProxyHalfClose(t *testing.T) {
	echo := startEcho(t)
	proxy, _, _, _ := startProxy(t, &Proxy{Allow: allow(t, echo)})
	c, br, resp := connect(t, proxy, echo)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT %s: %s", echo, resp.Status)
	}
	// Sent right away, then the end of it: the echo comes back whole,
	// then the end of the echo.
	io.WriteString(c, "ping, and then the end")
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(br)
	if err != nil || string(got) != "ping, and then the end" {
		t.Errorf("echo through the tunnel: %q, %v", got, err)
	}
}

func TestProxyDialFails(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	proxy, logs, _, _ := startProxy(t, &Proxy{Allow: allow(t, closed)})
	_, _, resp := connect(t, proxy, closed)
	if resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("CONNECT %s, where nothing listens: %s, want 502", closed, resp.Status)
	}
	failed := logs.entries(t, "egress failed")
	if len(failed) != 1 || failed[0]["level"] != "WARN" || failed[0]["error"] == nil || failed[0]["target"] != closed {
		t.Errorf("egress failed records: %v", failed)
	}
}

// stubResolver resolves the names it holds, and counts the lookups.
type stubResolver struct {
	mu      sync.Mutex
	names   map[string][]netip.Addr
	lookups int
}

func (r *stubResolver) LookupNetIP(_ context.Context, network, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lookups++
	if a, ok := r.names[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func TestProxyNameToLoopbackRefused(t *testing.T) {
	echo := startEcho(t)
	p := strconv.Itoa(port(t, echo))
	loopback := &stubResolver{names: map[string][]netip.Addr{
		"evil.example": {netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("::1"), netip.MustParseAddr("169.254.169.254")},
	}}
	tests := []struct {
		allow  []string
		target string
		code   int
	}{
		{[]string{"*.example:*"}, "evil.example:" + p, http.StatusForbidden},
		{[]string{"evil.example:" + p}, "evil.example:" + p, http.StatusForbidden},
		{[]string{"127.0.0.1:" + p}, "127.0.0.1:" + p, http.StatusOK},
		{[]string{"127.0.0.1:" + p}, "evil.example:" + p, http.StatusForbidden},
		{[]string{"evil.example:" + p, "127.0.0.0/8:*"}, "evil.example:" + p, http.StatusOK},
	}
	for _, tc := range tests {
		proxy, logs, _, _ := startProxy(t, &Proxy{Allow: allow(t, tc.allow...), Resolver: loopback})
		_, _, resp := connect(t, proxy, tc.target)
		if resp.StatusCode != tc.code {
			t.Errorf("allow %q, CONNECT %s: %s, want %d", tc.allow, tc.target, resp.Status, tc.code)
			continue
		}
		if tc.code == http.StatusForbidden {
			refused := logs.entries(t, "egress refused")
			if len(refused) != 1 || refused[0]["target"] != tc.target ||
				tc.allow[0] != "127.0.0.1:"+p && !strings.Contains(fmt.Sprint(refused[0]["reason"]), "loopback") {
				t.Errorf("allow %q, CONNECT %s: refused records %v", tc.allow, tc.target, refused)
			}
		}
	}
}

// recordingDialer connects every dial to one address, failing those to
// the addresses in fail, and records what it was asked for.
type recordingDialer struct {
	mu     sync.Mutex
	to     string
	fail   []string
	dialed []string
}

func (d *recordingDialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	d.mu.Lock()
	d.dialed = append(d.dialed, address)
	d.mu.Unlock()
	if slices.Contains(d.fail, address) {
		return nil, errors.New("unreachable in this test")
	}
	var nd net.Dialer
	return nd.DialContext(ctx, network, d.to)
}

func TestProxyDialsCheckedAddresses(t *testing.T) {
	echo := startEcho(t)
	resolver := &stubResolver{names: map[string][]netip.Addr{
		"mixed.example": {
			netip.MustParseAddr("127.0.0.1"),
			netip.MustParseAddr("192.0.2.1"),
			netip.MustParseAddr("::ffff:192.0.2.2"),
		},
	}}
	dialer := &recordingDialer{to: echo, fail: []string{"192.0.2.1:443"}}
	noHostAddrs := func() ([]netip.Addr, error) { return nil, nil } // this machine may have 192.0.2.2
	proxy, logs, _, _ := startProxy(t, &Proxy{Allow: allow(t, "*.example:443"), Resolver: resolver, Dialer: dialer, HostAddrs: noHostAddrs})
	c, br, resp := connect(t, proxy, "Mixed.Example:443")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT: %s", resp.Status)
	}
	io.WriteString(c, "x")
	if b, err := br.ReadByte(); err != nil || b != 'x' {
		t.Errorf("echo: %q, %v", b, err)
	}
	dialer.mu.Lock()
	defer dialer.mu.Unlock()
	if want := []string{"192.0.2.1:443", "192.0.2.2:443"}; !slices.Equal(dialer.dialed, want) {
		t.Errorf("dialed %q, want %q: the loopback address skipped, the others in turn", dialer.dialed, want)
	}
	if resolver.lookups != 1 {
		t.Errorf("%d lookups, want 1", resolver.lookups)
	}
	if allowed := logs.entries(t, "egress allowed"); len(allowed) != 1 || allowed[0]["rule"] != "*.example:443" {
		t.Errorf("egress allowed records %v", allowed)
	}
}

func TestServeCancel(t *testing.T) {
	echo := startEcho(t)
	proxy, _, cancel, done := startProxy(t, &Proxy{Allow: allow(t, echo)})
	c, br, resp := connect(t, proxy, echo)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT %s: %s", echo, resp.Status)
	}
	io.WriteString(c, "x")
	if _, err := br.ReadByte(); err != nil {
		t.Fatal(err)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Serve: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return after its context ended")
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("reading the tunnel after Serve returned: %v, want it closed", err)
	}
	if _, err := net.Dial("tcp", proxy); err == nil {
		t.Error("the proxy's listener is still open after Serve returned")
	}
}

func TestServeListenerClosed(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- (&Proxy{}).Serve(t.Context(), ln) }()
	ln.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Serve: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return after its listener was closed")
	}
}
