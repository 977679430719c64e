package egress

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"
)

func TestPublic(t *testing.T) {
	for _, tc := range []struct {
		addr   string
		public bool
	}{
		{"93.184.216.34", true}, {"2606:2800:220:1::1", true}, {"192.0.2.1", true},
		{"10.1.2.3", false}, {"172.16.0.1", false}, {"172.31.255.255", false}, {"172.32.0.1", true},
		{"192.168.1.1", false}, {"100.64.0.1", false}, {"100.127.255.255", false}, {"100.128.0.1", true},
		{"127.0.0.1", false}, {"127.1.2.3", false}, {"0.0.0.0", false}, {"0.1.2.3", false},
		{"169.254.169.254", false}, {"224.0.0.1", false}, {"255.255.255.255", false},
		{"::1", false}, {"::", false}, {"fe80::1", false}, {"fc00::1", false}, {"fd12::1", false}, {"ff02::1", false},
		{"::ffff:10.0.0.1", false}, {"::ffff:8.8.8.8", true},
		// Reserved, benchmarking, protocol assignments, discard.
		{"192.0.0.1", false}, {"192.0.0.255", false}, {"192.0.1.1", true},
		{"198.18.0.1", false}, {"198.19.255.255", false}, {"198.17.255.255", true}, {"198.20.0.1", true},
		{"240.0.0.1", false}, {"254.1.2.3", false}, {"239.255.255.255", false}, {"223.255.255.254", true},
		{"100::1", false}, {"100::ffff:ffff:ffff:ffff", false}, {"100:0:0:1::1", true},
		// IPv4 carried in IPv6 to a translator or a tunnel: 10.0.0.1 and
		// 169.254.169.254 through NAT64, 6to4, Teredo, IPv4-compatible.
		{"64:ff9b::a00:1", false}, {"64:ff9b::a9fe:a9fe", false}, {"64:ff9b::808:808", false}, {"64:ff9b:1::a00:1", false},
		{"64:ff9b:2::1", true},
		{"2002:a00:1::1", false}, {"2002::1", false}, {"2003::1", true},
		{"2001:0:a00:1::1", false}, {"2001:1::1", true}, {"2001:4860:4860::8888", true},
		{"::a00:1", false}, {"::8.8.8.8", false}, {"::1:0:0:1", true},
	} {
		if got := Public(netip.MustParseAddr(tc.addr)); got != tc.public {
			t.Errorf("Public(%s) = %v, want %v", tc.addr, got, tc.public)
		}
	}
}

// TestWideNetworksLeaveOutTheHostItself: 0.0.0.0/0 is the world, not the
// host's loopback or the unspecified address, which need a rule naming
// them.
func TestWideNetworksLeaveOutTheHostItself(t *testing.T) {
	for _, tc := range []struct {
		allow []string
		host  string
		ok    bool
	}{
		{[]string{"0.0.0.0/0:*"}, "93.184.216.34", true},
		{[]string{"0.0.0.0/0:*"}, "10.0.0.1", true},
		{[]string{"0.0.0.0/0:*"}, "127.0.0.1", false},
		{[]string{"0.0.0.0/0:*"}, "0.0.0.0", false},
		{[]string{"0.0.0.0/1:*"}, "127.0.0.1", false},
		{[]string{"[::/0]:*"}, "::1", false},
		{[]string{"[::/0]:*"}, "::", false},
		{[]string{"0.0.0.0/0:*", "127.0.0.0/8:*"}, "127.0.0.1", true},
		{[]string{"127.0.0.1:*"}, "127.0.0.1", true},
		{[]string{"127.0.0.0/24:*"}, "127.0.0.1", true},
		{[]string{"0.0.0.0:*"}, "0.0.0.0", true},
		{[]string{"[::1]:*"}, "::1", true},
	} {
		if _, ok := allow(t, tc.allow...).Match(tc.host, 80); ok != tc.ok {
			t.Errorf("allow %q, %s: %v, want %v", tc.allow, tc.host, ok, tc.ok)
		}
	}
}

// TestProxyNameToPrivateRefused: a name the sandbox's owner does not
// control (*.nip.io answers any address) must not reach private, shared,
// unique local or host addresses; an address rule for them does.
func TestProxyNameToPrivateRefused(t *testing.T) {
	echo := startEcho(t)
	hostAddr := netip.MustParseAddr("203.0.113.7")
	hostAddrs := func() ([]netip.Addr, error) { return []netip.Addr{hostAddr}, nil }
	resolver := &stubResolver{names: map[string][]netip.Addr{
		"10-0-0-5.nip.example":      {netip.MustParseAddr("10.0.0.5")},
		"cgnat.nip.example":         {netip.MustParseAddr("100.64.1.1")},
		"ula.nip.example":           {netip.MustParseAddr("fd00::1")},
		"rfc1918.nip.example":       {netip.MustParseAddr("172.20.0.1"), netip.MustParseAddr("192.168.0.1")},
		"host.nip.example":          {hostAddr},
		"public.nip.example":        {netip.MustParseAddr("198.51.100.1")},
		"public-and-10.nip.example": {netip.MustParseAddr("10.0.0.9"), netip.MustParseAddr("198.51.100.2")},
	}}
	for _, tc := range []struct {
		allow  []string
		target string
		code   int
	}{
		{[]string{"*.nip.example:443"}, "10-0-0-5.nip.example:443", http.StatusForbidden},
		{[]string{"*.nip.example:443"}, "cgnat.nip.example:443", http.StatusForbidden},
		{[]string{"*.nip.example:443"}, "ula.nip.example:443", http.StatusForbidden},
		{[]string{"*.nip.example:443"}, "rfc1918.nip.example:443", http.StatusForbidden},
		{[]string{"*.nip.example:443"}, "host.nip.example:443", http.StatusForbidden},
		{[]string{"*.nip.example:443"}, "public.nip.example:443", http.StatusOK},
		{[]string{"*.nip.example:443"}, "public-and-10.nip.example:443", http.StatusOK},
		{[]string{"*.nip.example:443", "10.0.0.0/8:443"}, "10-0-0-5.nip.example:443", http.StatusOK},
		{[]string{"*.nip.example:443", "203.0.113.7:443"}, "host.nip.example:443", http.StatusOK},
	} {
		dialer := &recordingDialer{to: echo}
		proxy, logs, _, _ := startProxy(t, &Proxy{Allow: allow(t, tc.allow...), Resolver: resolver, Dialer: dialer, HostAddrs: hostAddrs})
		c, _, resp := connect(t, proxy, tc.target)
		c.Close()
		if resp.StatusCode != tc.code {
			t.Errorf("allow %q, CONNECT %s: %s, want %d", tc.allow, tc.target, resp.Status, tc.code)
			continue
		}
		dialer.mu.Lock()
		dialed := dialer.dialed
		dialer.mu.Unlock()
		if tc.code == http.StatusForbidden {
			if len(dialed) != 0 {
				t.Errorf("allow %q, CONNECT %s: refused but dialed %q", tc.allow, tc.target, dialed)
			}
			if refused := logs.entries(t, "egress refused"); len(refused) != 1 || !strings.Contains(fmt.Sprint(refused[0]["reason"]), "private") {
				t.Errorf("allow %q, CONNECT %s: refused records %v", tc.allow, tc.target, refused)
			}
		}
		if tc.target == "public-and-10.nip.example:443" && (len(dialed) != 1 || dialed[0] != "198.51.100.2:443") {
			t.Errorf("CONNECT %s dialed %q; want only the public address", tc.target, dialed)
		}
	}
}

// TestProxyHostHeaderMustBeTheURLsHost: plain HTTP through the proxy goes
// to the host the URL names and was checked; a Host header naming another
// (a virtual host of the same address the allowlist never allowed) is
// refused.
func TestProxyHostHeaderMustBeTheURLsHost(t *testing.T) {
	hosts := make(chan string, 4)
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hosts <- r.Host
		io.WriteString(w, "hello from "+r.Host)
	}))
	t.Cleanup(origin.Close)
	target := strings.TrimPrefix(origin.URL, "http://")
	proxy, logs, _, _ := startProxy(t, &Proxy{Allow: allow(t, target)})
	get := func(host string) *http.Response {
		c, err := net.Dial("tcp", proxy)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		c.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(c, "GET http://%s/ HTTP/1.1\r\nHost: %s\r\n\r\n", target, host)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	if resp := get(target); resp.StatusCode != http.StatusOK || <-hosts != target {
		t.Fatalf("GET with the URL's own Host: %s", resp.Status)
	}
	resp := get("intranet.example")
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body(t, resp), "names another host") {
		t.Fatalf("GET with Host: intranet.example: %s", resp.Status)
	}
	select {
	case h := <-hosts:
		t.Fatalf("the origin was asked for Host %q", h)
	default:
	}
	if len(logs.entries(t, "egress refused")) != 1 {
		t.Errorf("no log line of the refusal")
	}
}

func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// TestProxyCapsConnections: past MaxConns, connections are answered 503
// and closed at once, so the daemon's descriptors stay bounded however
// many the sandbox opens.
func TestProxyCapsConnections(t *testing.T) {
	echo := startEcho(t)
	const max = 8
	proxy, logs, _, _ := startProxy(t, &Proxy{Allow: allow(t, echo), MaxConns: max})
	var held []net.Conn
	for range max {
		c, r, resp := connect(t, proxy, echo)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("CONNECT within the cap: %s", resp.Status)
		}
		// A byte through the tunnel and back: the echo server has
		// accepted its end, so that its descriptor is in the count
		// below, not added after it.
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		if b, err := r.ReadByte(); err != nil || b != 'x' {
			t.Fatalf("a byte through the tunnel: %q, %v", b, err)
		}
		held = append(held, c)
	}
	base := openFDs(t)
	for i := range 50 {
		c, err := net.Dial("tcp", proxy)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil || resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body(t, resp), "too many connections") {
			t.Fatalf("connection %d past the cap: %v, %v", i, resp, err)
		}
		c.Close()
	}
	// The test process holds both ends: the proxy's side of a refused
	// connection must be gone, not waiting.
	// Other tests of the package run meanwhile: wait for the count to
	// settle rather than read it once.
	now := openFDs(t)
	for deadline := time.Now().Add(3 * time.Second); now > base+4 && time.Now().Before(deadline); now = openFDs(t) {
		time.Sleep(20 * time.Millisecond)
	}
	if now > base+4 {
		t.Errorf("descriptors grew from %d to %d over 50 refused connections", base, now)
	}
	// The first of a period one by one, the rest counted (see
	// TestProxyRefusalLinesAreCountedPastABurst).
	if n := len(logs.entries(t, "egress refused")); n != RefusalLogBurst {
		t.Errorf("%d refusals logged one by one, want %d", n, RefusalLogBurst)
	}
	held[0].Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, _, resp := connect(t, proxy, echo)
		c.Close()
		if resp.StatusCode == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after one closed: %s", resp.Status)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestProxyClosesIdleConnections: a tunnel where no byte moves either way
// is closed after IdleTimeout; one that talks is not.
func TestProxyClosesIdleConnections(t *testing.T) {
	echo := startEcho(t)
	const idle = 300 * time.Millisecond
	proxy, logs, _, _ := startProxy(t, &Proxy{Allow: allow(t, echo), IdleTimeout: idle})
	quiet, qbr, resp := connect(t, proxy, echo)
	if resp.StatusCode != http.StatusOK {
		t.Fatal(resp.Status)
	}
	busy, bbr, _ := connect(t, proxy, echo)
	start := time.Now()
	for time.Since(start) < 3*idle {
		io.WriteString(busy, "x")
		if _, err := bbr.ReadByte(); err != nil {
			t.Fatalf("a busy tunnel after %v: %v", time.Since(start), err)
		}
		time.Sleep(idle / 5)
	}
	quiet.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := qbr.ReadByte(); err != io.EOF {
		t.Fatalf("an idle tunnel after %v: %v; want it closed (EOF)", time.Since(start), err)
	}
	if len(logs.entries(t, "egress closed an idle connection")) != 1 {
		t.Errorf("want one log line of the idle close")
	}
}

// TestProxyRefusalLinesAreCountedPastABurst: a sandbox that connects in
// a loop past its cap does not get a journal line written per connection:
// in each period the first RefusalLogBurst refusals are logged one by
// one, then one line counts the rest when the period ends, so the log
// still tells how many were refused. A new period logs one by one again,
// and what is counted when the proxy stops is logged then.
func TestProxyRefusalLinesAreCountedPastABurst(t *testing.T) {
	echo := startEcho(t)
	const period = 500 * time.Millisecond
	proxy, logs, cancel, done := startProxy(t, &Proxy{Allow: allow(t, echo), MaxConns: 1, RefusalLogPeriod: period})
	held, _, resp := connect(t, proxy, echo)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT within the cap: %s", resp.Status)
	}
	defer held.Close()
	refuse := func(n int) {
		t.Helper()
		for i := range n {
			c, err := net.Dial("tcp", proxy)
			if err != nil {
				t.Fatal(err)
			}
			c.SetDeadline(time.Now().Add(10 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil || resp.StatusCode != http.StatusServiceUnavailable {
				t.Fatalf("connection %d past the cap: %v, %v", i, resp, err)
			}
			c.Close()
		}
	}
	counted := func() (n int) {
		for _, e := range logs.entries(t, "egress refused more") {
			n += int(e["count"].(float64))
		}
		return n
	}
	start := time.Now()
	refuse(50)
	if time.Since(start) > period/2 {
		t.Skipf("50 refused connections took %v, too long for a period of %v", time.Since(start), period)
	}
	if n := len(logs.entries(t, "egress refused")); n != RefusalLogBurst {
		t.Fatalf("%d refusals logged one by one in a period, want %d", n, RefusalLogBurst)
	}
	if n := counted(); n != 0 {
		t.Fatalf("%d refusals counted before the period ended", n)
	}
	for deadline := time.Now().Add(5 * time.Second); counted() == 0 && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	if n := counted(); n != 50-RefusalLogBurst {
		t.Fatalf("after the period, %d refusals counted, want %d", n, 50-RefusalLogBurst)
	}
	e := logs.entries(t, "egress refused more")[0]
	if !strings.Contains(e["reason"].(string), "40 more refused") || e["SANDBOX_ID"] != "sb-test" {
		t.Errorf("the count's line: %v", e)
	}
	// A new period: one by one again, and the rest counted at the stop.
	refuse(RefusalLogBurst + 5)
	if n := len(logs.entries(t, "egress refused")); n != 2*RefusalLogBurst {
		t.Errorf("%d refusals logged one by one after a new period began, want %d", n, 2*RefusalLogBurst)
	}
	held.Close()
	cancel()
	<-done
	if n := counted(); n != 50-RefusalLogBurst+5 {
		t.Errorf("once the proxy stopped, %d refusals counted, want %d", n, 50-RefusalLogBurst+5)
	}
}
