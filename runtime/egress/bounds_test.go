package egress

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/connbound"
)

// TestProxiesCapAnOwnersConnections: the proxies of one owner's two
// sandboxes, sharing a counter, serve MaxConnsPerOwner tunnels between
// them and refuse the next at once, 503, logged with why; another
// owner's proxy still serves; a tunnel closed gives its place back.
func TestProxiesCapAnOwnersConnections(t *testing.T) {
	echo := startEcho(t)
	var conns connbound.Counter
	a, _, _, _ := startProxy(t, &Proxy{Allow: allow(t, echo), Conns: &conns, Owner: 1000})
	b, logs, _, _ := startProxy(t, &Proxy{Allow: allow(t, echo), Conns: &conns, Owner: 1000})
	other, _, _, _ := startProxy(t, &Proxy{Allow: allow(t, echo), Conns: &conns, Owner: 2000})

	var held []net.Conn
	for i := range MaxConnsPerOwner {
		proxy := a
		if i >= MaxConnsPerOwner/2 {
			proxy = b
		}
		c, _, resp := connect(t, proxy, echo)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("tunnel %d of the owner's %d: %s", i+1, MaxConnsPerOwner, resp.Status)
		}
		held = append(held, c)
	}
	refused := func(proxy string) (int, string) {
		c, err := net.Dial("tcp", proxy)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", echo, echo)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("reading the reply past the owner's cap: %v", err)
		}
		return resp.StatusCode, body(t, resp)
	}
	if code, text := refused(b); code != http.StatusServiceUnavailable || !strings.Contains(text, "the most an owner may have") {
		t.Fatalf("the owner's tunnel %d through its second sandbox: %d %q; want 503, the owner's cap", MaxConnsPerOwner+1, code, text)
	}
	if code, _ := refused(a); code != http.StatusServiceUnavailable {
		t.Fatalf("the owner's tunnel %d through its first sandbox: %d; want 503", MaxConnsPerOwner+1, code)
	}
	lines := logs.entries(t, "egress refused")
	if len(lines) != 1 || !strings.Contains(lines[0]["reason"].(string), "uid 1000's sandboxes, the most an owner may have") {
		t.Errorf("the refusal's line: %v", lines)
	}
	if _, _, resp := connect(t, other, echo); resp.StatusCode != http.StatusOK {
		t.Errorf("another owner's tunnel: %s", resp.Status)
	}
	held[0].Close()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if conns.Total() == MaxConnsPerOwner { // the other owner's one, and 255
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("10s after a tunnel closed, %d counted; want %d", conns.Total(), MaxConnsPerOwner)
		}
	}
	if _, _, resp := connect(t, b, echo); resp.StatusCode != http.StatusOK {
		t.Errorf("a tunnel once one closed: %s", resp.Status)
	}
}

// TestProxyCapsAllConnections: past MaxConnsAll counted for everyone
// (here by other owners, through other proxies), a sandbox's first
// tunnel is refused at once, 503, and served again once one is released.
func TestProxyCapsAllConnections(t *testing.T) {
	echo := startEcho(t)
	var conns connbound.Counter
	var releases []func()
	// Other owners take all: each as many as it is given (its cap, or
	// its fair share of the last quarter).
	for uid := uint32(1); conns.Total() < MaxConnsAll; uid++ {
		for {
			release, _, _, _ := conns.Admit(uid, MaxConnsPerOwner, MaxConnsAll)
			if release == nil {
				break
			}
			releases = append(releases, release)
		}
	}
	proxy, logs, _, _ := startProxy(t, &Proxy{Allow: allow(t, echo), Conns: &conns, Owner: 1000})
	c, _, resp := connect(t, proxy, echo)
	if text := body(t, resp); resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(text, "for all sandboxes") {
		t.Fatalf("a tunnel past %d in all: %s %q; want 503", MaxConnsAll, resp.Status, text)
	}
	c.Close()
	if lines := logs.entries(t, "egress refused"); len(lines) != 1 || !strings.Contains(lines[0]["reason"].(string), "the most the daemon holds") {
		t.Errorf("the refusal's line: %v", lines)
	}
	releases[0]()
	if _, _, resp := connect(t, proxy, echo); resp.StatusCode != http.StatusOK {
		t.Errorf("a tunnel once one was released: %s", resp.Status)
	}
}
