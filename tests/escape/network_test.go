package escape

import (
	"bufio"
	"context"
	"fmt"
	"github.com/sandboxd/sandboxd/supervisor/commands"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/runtime/egress"
	"github.com/sandboxd/sandboxd/runtime/nsinit"
	"github.com/sandboxd/sandboxd/supervisor"
)

// The allowlist proxy from inside real sandboxes (finding 6a and 8 of
// issue 15). The test hosts are network namespaces these tests make; the
// addresses 192.0.2.0/24, 198.51.100.0/24 and 203.0.113.0/24 (kept for
// documentation, RFC 5737) stand for public hosts there: the proxy counts
// them public, and nothing outside the testbed ever carries them.

// TestEgressNameRuleReachesNoPrivateOrHostAddress: a name anyone can
// point anywhere (*.nip.io) must not take a sandbox to a private address
// or to the host's own; an address or network rule naming them does.
func TestEgressNameRuleReachesNoPrivateOrHostAddress(t *testing.T) {
	priv, _ := netHost(t, "net781", "10.78.1")
	serveIn(t, "net781", priv+":8080", hello(priv))
	pub, own := netHost(t, "netdoc1", "192.0.2")
	serveIn(t, "netdoc1", pub+":8080", hello(pub))
	// A service of the host's own, on its side of the veth: an address
	// the proxy would count public, but it is the host's.
	ln, err := net.Listen("tcp4", own+":8080")
	if err != nil {
		t.Fatal(err)
	}
	serve(t, ln, hello(own))
	addHosts(t, map[string]string{"private.test": priv, "public.test": pub, "own.test": own})

	outside(t, nobody, "fetching the private test host by name", "curl -sSf --max-time 5 http://private.test:8080/")
	outside(t, nobody, "fetching the host's own service by name", "curl -sSf --max-time 5 http://own.test:8080/")

	b := newBox(t, supervisor.CreateOptions{Network: nsinit.NetworkAllowlist,
		Allow: []string{"private.test:8080", "public.test:8080", "own.test:8080"}})
	if out, res := b.run(t, nobody, "curl -sSf http://public.test:8080/"); res.Code != 0 || out != "hello from "+pub+"\n" {
		t.Fatalf("a name rule to a public address (the control inside): %v %q", res, out)
	}
	for _, uid := range users {
		for _, name := range []string{"private.test", "own.test"} {
			for _, how := range []string{"", "-p "} { // plain HTTP, CONNECT
				code := httpCode(t, b, uid, how+"http://"+name+":8080/")
				if code != "403" {
					t.Errorf("ESCAPE: %shttp://%s:8080/ through the proxy by a name rule (uid %d): HTTP %s; want 403", how, name, uid, code)
				}
			}
		}
	}

	// The same targets by explicit rules: the owner asked for them.
	b2 := newBoxIn(t, b.env, supervisor.CreateOptions{Network: nsinit.NetworkAllowlist,
		Allow: []string{"private.test:8080", "10.78.1.2/32:8080", "own.test:8080", own + ":8080"}})
	for url, want := range map[string]string{
		"http://private.test:8080/": priv, "http://" + priv + ":8080/": priv,
		"http://own.test:8080/": own, "http://" + own + ":8080/": own,
	} {
		if out, res := b2.run(t, nobody, "curl -sSf "+url); res.Code != 0 || out != "hello from "+want+"\n" {
			t.Errorf("%s with an address rule for it: %v %q", url, res, out)
		}
	}
}

// TestEgressWideNetworkLeavesOutTheHost: 0.0.0.0/0 means the world, not
// the host's loopback; a rule naming 127.0.0.1 does reach it.
func TestEgressWideNetworkLeavesOutTheHost(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serve(t, ln, hello("the host's loopback"))
	port := fmt.Sprint(ln.Addr().(*net.TCPAddr).Port)
	targets := []string{"127.0.0.1:" + port, "0.0.0.0:" + port} // connecting to 0.0.0.0 reaches loopback
	for _, target := range targets {
		outside(t, nobody, "fetching "+target, "curl -sSf --max-time 5 http://"+target+"/")
	}
	b := newBox(t, supervisor.CreateOptions{Network: nsinit.NetworkAllowlist, Allow: []string{"0.0.0.0/0:*", "[::/0]:*"}})
	for _, uid := range users {
		for _, target := range targets {
			for _, how := range []string{"", "-p "} {
				if code := httpCode(t, b, uid, how+"http://"+target+"/"); code != "403" {
					t.Errorf("ESCAPE: %shttp://%s/ through the proxy allowing 0.0.0.0/0 (uid %d): HTTP %s; want 403", how, target, uid, code)
				}
			}
		}
	}
	b2 := newBoxIn(t, b.env, supervisor.CreateOptions{Network: nsinit.NetworkAllowlist, Allow: []string{"127.0.0.1:" + port}})
	if code := httpCode(t, b2, nobody, "http://127.0.0.1:"+port+"/"); code != "200" {
		t.Errorf("the host's loopback with a rule naming it (the control inside): HTTP %s", code)
	}
}

// TestEgressHostHeaderNamesTheAllowedHost: a plain HTTP request for an
// allowed host must not carry a Host header naming another virtual host
// of the same server. (What goes through a CONNECT tunnel, a Host or a
// TLS server name, is the sandbox's: the proxy decides on host and port
// only, so a CONNECT to a.test:8080 can still ask for b.test.)
func TestEgressHostHeaderNamesTheAllowedHost(t *testing.T) {
	addr, _ := netHost(t, "netdoc2", "198.51.100")
	var mu sync.Mutex
	var seen []string
	serveIn(t, "netdoc2", addr+":8080", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Host)
		mu.Unlock()
		fmt.Fprintf(w, "hello from %s\n", r.Host)
	}))
	hosts := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(seen)
	}
	addHosts(t, map[string]string{"a.test": addr, "b.test": addr})

	// Outside, the server serves b.test when asked, by name or by Host.
	for _, args := range []string{"http://b.test:8080/", "-H 'Host: b.test' http://a.test:8080/"} {
		if out := outside(t, nobody, "asking for the virtual host b.test", "curl -sSf --max-time 5 "+args); out != "hello from b.test\n" && out != "hello from b.test:8080\n" {
			t.Fatalf("the control: curl %s outside: %q", args, out)
		}
	}
	before := len(hosts())

	b := newBox(t, supervisor.CreateOptions{Network: nsinit.NetworkAllowlist, Allow: []string{"a.test:8080"}})
	if out, res := b.run(t, nobody, "curl -sSf http://a.test:8080/"); res.Code != 0 || out != "hello from a.test:8080\n" {
		t.Fatalf("the allowed host through the proxy (the control inside): %v %q", res, out)
	}
	if out, res := b.run(t, nobody, "curl -sSf -H 'Host: A.Test:8080' http://a.test:8080/"); res.Code != 0 || out != "hello from a.test:8080\n" {
		t.Errorf("the allowed host named in another case in Host: %v %q", res, out)
	}
	for _, uid := range users {
		for _, header := range []string{"Host: b.test", "Host: b.test:8080", "Host: a.test.b.test:8080"} {
			if code := httpCode(t, b, uid, "-H '"+header+"' http://a.test:8080/"); code != "400" {
				t.Errorf("ESCAPE: http://a.test:8080/ with %q through the proxy (uid %d): HTTP %s; want 400", header, uid, code)
			}
		}
		b.mustFail(t, uid, "reaching b.test by its own name", "curl -sSf http://b.test:8080/")
	}
	for _, h := range hosts()[before:] {
		if strings.Contains(h, "b.test") {
			t.Errorf("ESCAPE: the server got a request for Host %q from the sandbox (all it got: %q)", h, hosts()[before:])
		}
	}
}

// TestEgressConnectionCapPerSandbox: a sandbox that opens connections
// without end through its proxy gets 503 past the cap, and the daemon's
// descriptors stay bounded by it.
func TestEgressConnectionCapPerSandbox(t *testing.T) {
	const maxConns = egress.DefaultMaxConns
	const n = maxConns + 64
	addr, _ := netHost(t, "netdoc3", "203.0.113")
	target := addr + ":9000"
	holdOpen(t, "netdoc3", addr, 9000)

	// Outside, the test host holds all n connections.
	if out := outside(t, 0, fmt.Sprintf("holding %d connections to the test host", n), clientScript("direct", target, n)); out != fmt.Sprintf("held open=%d\n", n) {
		t.Fatalf("the control: %d connections to the test host outside: %q", n, out)
	}

	b := newBox(t, supervisor.CreateOptions{Network: nsinit.NetworkAllowlist, Allow: []string{target}})
	base := countFDs(t)
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer inW.Close()
	defer outR.Close()
	cmd, err := b.env.Commands.Exec(ctx, b.sb.ID, commands.ExecOptions{
		Argv: []string{"/bin/sh", "-c", clientScript("proxy", target, n)}, UID: nobody,
		Stdio: []*os.File{inR, outW, outW}, Timeout: 90 * time.Second,
	})
	inR.Close()
	outW.Close()
	if err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 16)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(outR)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	var held string
	for held == "" {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("the sandbox's client ended before holding its connections: %v", cmd.Result())
			}
			if strings.HasPrefix(l, "held ") {
				held = l
			} else {
				t.Log("client: " + l)
			}
		case <-time.After(60 * time.Second):
			t.Fatal("the sandbox's client did not open its connections in 60s")
		}
	}
	during := countFDs(t)
	if want := fmt.Sprintf("held 200=%d 503=%d", maxConns, n-maxConns); held != want {
		t.Errorf("ESCAPE: %d CONNECTs held open through a proxy capped at %d: %q; want %q", n, maxConns, held, want)
	}
	// Each tunnel is two descriptors of the daemon: the sandbox's end and
	// the origin's.
	if grew := during - base; grew > 2*maxConns+32 {
		t.Errorf("ESCAPE: the daemon's descriptors grew by %d with %d connections held (cap %d); want at most %d", grew, n, maxConns, 2*maxConns+32)
	} else {
		t.Logf("the daemon's descriptors: %d before, %d with %d connections held through the proxy (cap %d)", base, during, n, maxConns)
	}

	inW.Close() // the client lets go
	for range lines {
	}
	if res := cmd.Result(); res.How != nsinit.Exited || res.Code != 0 {
		t.Errorf("the sandbox's client: %v", res)
	}
	deadline := time.Now().Add(10 * time.Second)
	for countFDs(t) > base+8 {
		if time.Now().After(deadline) {
			t.Fatalf("the daemon's descriptors 10s after the sandbox closed its connections: %d, %d before", countFDs(t), base)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if out, res := b.run(t, nobody, clientScript("proxy", target, 1)); out != "held 200=1\n" {
		t.Errorf("a CONNECT once the sandbox's connections closed: %v %q", res, out)
	}
}

// clientScript is a shell command that opens n connections to target
// (directly, or by CONNECT through the sandbox's proxy), counts how each
// went, prints "held" and the counts, and keeps them open until its stdin
// ends.
func clientScript(mode, target string, n int) string {
	const code = `
import resource, socket, sys
mode, target, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
host, port = target.rsplit(":", 1)
socks, counts = [], {}
for i in range(n):
    try:
        if mode == "direct":
            s = socket.create_connection((host, int(port)), timeout=10)
            how = "open"
        else:
            s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
            s.sendall(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (target, target)).encode())
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = s.recv(4096)
                if not chunk:
                    break
                data += chunk
            how = data.split(b" ", 2)[1].decode() if data.startswith(b"HTTP/") else "none"
        socks.append(s)
    except OSError as e:
        how = type(e).__name__
    counts[how] = counts.get(how, 0) + 1
print("held", " ".join("%s=%d" % kv for kv in sorted(counts.items())), flush=True)
sys.stdin.read()
`
	return strings.Join(quoteAll([]string{"/usr/bin/python3", "-c", code, mode, target, fmt.Sprint(n)}), " ")
}

// hostListen is the start of a test host's server, run as `python3 -c
// CODE ADDR PORT`: with as many descriptors as it may have, it listens on
// ADDR:PORT (the listener ls, in the selector sel) and says "listening".
const hostListen = `
import resource, selectors, socket, sys
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
ls = socket.socket()
ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind((sys.argv[1], int(sys.argv[2])))
ls.listen(4096)
sel = selectors.DefaultSelector()
sel.register(ls, selectors.EVENT_READ)
print("listening", flush=True)
`

// serveOnHost runs hostListen and then serve, the server's loop, in the
// network namespace name from a process of its own (so that its
// descriptors are not the daemon's), once it listens on addr:port; what
// names it in failures. It is killed when the test ends.
func serveOnHost(t *testing.T, what, name, serve, addr string, port int) {
	t.Helper()
	cmd := exec.Command("ip", "netns", "exec", name, "/usr/bin/python3", "-c", hostListen+serve, addr, fmt.Sprint(port))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", what, err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }) // the one this test started
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "listening\n" {
		t.Fatalf("%s: %q %v", what, line, err)
	}
}

// holdOpen serves addr:port in the network namespace name: it accepts
// every connection and holds it until the other end closes it.
func holdOpen(t *testing.T, name, addr string, port int) {
	t.Helper()
	serveOnHost(t, "the test host's server", name, `while True:
    for key, _ in sel.select():
        if key.fileobj is ls:
            c, _ = ls.accept()
            sel.register(c, selectors.EVENT_READ)
            continue
        try:
            data = key.fileobj.recv(4096)
        except OSError:
            data = b""
        if not data:
            sel.unregister(key.fileobj)
            key.fileobj.close()
`, addr, port)
}

// netHost makes the network namespace name with a veth pair to the
// testbed's: the test host is prefix.2, the testbed's side prefix.1. It
// is removed when the test ends.
func netHost(t *testing.T, name, prefix string) (host, side string) {
	t.Helper()
	host, side = prefix+".2", prefix+".1"
	mustRun(t, "ip", "netns", "add", name)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
	mustRun(t, "ip", "link", "add", "v"+name, "type", "veth", "peer", "name", "eth0", "netns", name)
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", "v"+name).Run() })
	mustRun(t, "ip", "addr", "add", side+"/24", "dev", "v"+name)
	mustRun(t, "ip", "link", "set", "v"+name, "up")
	mustRun(t, "ip", "-n", name, "addr", "add", host+"/24", "dev", "eth0")
	mustRun(t, "ip", "-n", name, "link", "set", "eth0", "up")
	mustRun(t, "ip", "-n", name, "link", "set", "lo", "up")
	return host, side
}

func mustRun(t *testing.T, argv ...string) {
	t.Helper()
	if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, out)
	}
}

// serveIn serves h on addr in the network namespace name until the test
// ends.
func serveIn(t *testing.T, name, addr string, h http.Handler) {
	t.Helper()
	ln, err := egress.ListenInNetNS("/run/netns/"+name, addr)
	if err != nil {
		t.Fatal(err)
	}
	serve(t, ln, h)
}

func serve(t *testing.T, ln net.Listener, h http.Handler) {
	srv := &http.Server{Handler: h}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
}

func hello(who string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "hello from %s\n", who)
	})
}

// addHosts adds names to the testbed's /etc/hosts (the testbed's root is
// a throw-away overlay) until the test ends, and waits until the daemon's
// resolver, in this process, sees them (Go rereads the file every few
// seconds).
func addHosts(t *testing.T, names map[string]string) {
	t.Helper()
	const path = "/etc/hosts"
	old, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	add := string(old)
	if add != "" && !strings.HasSuffix(add, "\n") {
		add += "\n"
	}
	for name, addr := range names {
		add += addr + " " + name + "\n"
	}
	if err := os.WriteFile(path, []byte(add), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.WriteFile(path, old, 0o644); err != nil {
			t.Errorf("restoring %s: %v", path, err)
		}
	})
	deadline := time.Now().Add(15 * time.Second)
	for name, addr := range names {
		for {
			got, _ := net.DefaultResolver.LookupHost(context.Background(), name)
			if slices.Contains(got, addr) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s resolves to %q 15s after adding it to %s; want %s", name, got, path, addr)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}

// httpCode runs curl args in the sandbox as uid, through its proxy (even for
// the loopback addresses its no_proxy lists), and returns the HTTP status
// it got, of the request or of its CONNECT: "000" when there was none.
func httpCode(t *testing.T, b *box, uid uint32, args string) string {
	t.Helper()
	out, _ := b.run(t, uid, "env -u no_proxy -u NO_PROXY curl -s -o /dev/null -w '%{http_code} %{http_connect}' --max-time 10 "+args)
	code, connect, _ := strings.Cut(strings.TrimSpace(out), " ")
	if code == "000" && connect != "" {
		return connect
	}
	return code
}

// countFDs is how many descriptors this process, the daemon, has open.
func countFDs(t *testing.T) int {
	t.Helper()
	f, err := os.Open("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil && err != io.EOF {
		t.Fatal(err)
	}
	return len(names) - 1 // the directory itself
}
