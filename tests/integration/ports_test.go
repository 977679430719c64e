package integration

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/tests/testbed"
)

// runAs runs sandboxctl as the test (root) or, with a user, as that user.
type runAs func(args ...string) (string, string, int)

// startServer starts a web server detached in sandbox sb, on its own
// 127.0.0.1:8000, serving a directory of one file (marker.txt), and
// waits until it answers inside.
func startServer(t *testing.T, run runAs, sb string) {
	t.Helper()
	// Out of the command's process group (setsid), which ends with it:
	// the shell waits a little, so that the server has left the group
	// before the shell ends.
	script := "mkdir -p /tmp/site && echo hi > /tmp/site/marker.txt && cd /tmp/site || exit 1; " +
		"setsid python3 -m http.server 8000 --bind 127.0.0.1 </dev/null >/tmp/server.log 2>&1 & sleep 1"
	if out, errOut, code := run("exec", "--detach", sb, "--", "sh", "-c", script); code != 0 {
		t.Fatalf("starting the server in %s: exit %d: %s%s", sb, code, out, errOut)
	}
	probe := "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/', timeout=2)"
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, errOut, code := run("exec", sb, "--", "python3", "-c", probe)
		if code == 0 {
			return
		}
		if time.Now().After(deadline) {
			log, _, _ := run("exec", sb, "--", "sh", "-c", "cat /tmp/server.log 2>&1; ps -ef")
			t.Fatalf("the server in %s does not answer inside after 20s: %s\nits log and the processes:\n%s", sb, errOut, log)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// curl fetches / through the unix socket at path (or, path "", from
// the TCP address addr), as user ("": root). It returns what curl
// printed (the response with its headers) and its exit status.
func curl(t *testing.T, user, path, addr string) (string, int) {
	t.Helper()
	argv := []string{"curl", "-sS", "-i", "--max-time", "10"}
	if path != "" {
		argv = append(argv, "--unix-socket", path, "http://localhost/")
	} else {
		argv = append(argv, "http://"+addr+"/")
	}
	if user != "" {
		argv = append([]string{"setpriv", "--reuid=" + user, "--regid=" + user, "--init-groups"}, argv...)
	}
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("%s: %v", strings.Join(argv, " "), err)
	}
	code := 0
	if exit != nil {
		code = exit.ExitCode()
	}
	return string(out), code
}

// answers says whether curl's output is the server's listing.
func answers(out string) bool {
	return strings.HasPrefix(out, "HTTP/1.0 200 OK") && strings.Contains(out, "marker.txt")
}

// checkSocket checks that path is a socket of uid, mode 0600.
func checkSocket(t *testing.T, path string, uid uint32) {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		t.Fatalf("the exposed port's socket: %v", err)
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFSOCK || st.Mode&0o7777 != 0o600 || st.Uid != uid {
		t.Errorf("%s: mode %o, uid %d; want a socket of uid %d, mode 0600", path, st.Mode, st.Uid, uid)
	}
}

func gone(t *testing.T, path string) {
	t.Helper()
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s after the port was closed: %v; want it gone", path, err)
	}
}

// TestPortsReachAServerInASandbox: a server started detached in a
// sandbox of network none answers from the host through the unix socket
// and the TCP port of `sandboxctl port`, to root (the owner here) and to
// no other user; bad ports, a second expose, a frozen sandbox and the
// 17th port are refused; close and destroy take the sockets away.
func TestPortsReachAServerInASandbox(t *testing.T) {
	install(t)
	const other = "ports-other"
	groupMember(t, other)
	sb := strings.TrimSpace(ok(t, "create", "-q", "web"))
	defer ctl(t, "", "destroy", sb)
	if network := property(t, "/org/sandboxd1/sandbox/"+sb, "Network"); network != "none" {
		t.Fatalf("the sandbox's network is %q; the test wants none, the default", network)
	}
	root := func(args ...string) (string, string, int) { return ctl(t, "", args...) }
	startServer(t, root, sb)

	path := strings.TrimSpace(ok(t, "port", sb, "8000"))
	if want := fmt.Sprintf("/run/sandboxd/ports/%s-8000.sock", sb); path != want {
		t.Fatalf("port printed %q; want %q", path, want)
	}
	checkSocket(t, path, 0)
	if out, code := curl(t, "", path, ""); code != 0 || !answers(out) {
		t.Errorf("curl through %s as root: exit %d:\n%s", path, code, out)
	}
	if out, code := curl(t, other, path, ""); code == 0 || strings.Contains(out, "marker.txt") {
		t.Errorf("curl through %s as %s (not the owner) answered: exit %d:\n%s", path, other, code, out)
	}

	fails(t, 5, `exposing port 8000 of sandbox `+sb+`: it is exposed already, at `+regexp.QuoteMeta(path), "port", sb, "8000")
	fails(t, 2, `exposing port 0 of sandbox `+sb+`: a port is 1 to 65535`, "port", sb, "0")
	fails(t, 2, `"70000" is not a port \(1 to 65535\)`, "port", sb, "70000")
	fails(t, 2, `closing port 8001 of sandbox `+sb+`: it is not exposed`, "port", "--close", sb, "8001")

	ok(t, "port", "--close", sb, "8000")
	gone(t, path)

	addr := strings.TrimSpace(ok(t, "port", "--tcp", sb, "8000"))
	if !regexp.MustCompile(`^127\.0\.0\.1:\d+$`).MatchString(addr) {
		t.Fatalf("port --tcp printed %q; want 127.0.0.1:N", addr)
	}
	checkSocket(t, path, 0) // the unix socket comes with it
	if out, code := curl(t, "", "", addr); code != 0 || !answers(out) {
		t.Errorf("curl %s as root: exit %d:\n%s", addr, code, out)
	}
	if out, code := curl(t, other, "", addr); code == 0 || strings.Contains(out, "marker.txt") {
		t.Errorf("curl %s as %s (not the owner) answered: exit %d:\n%s", addr, other, code, out)
	}
	if journal := testbed.MustRun(t, "journalctl", "--no-pager", "-o", "cat", "-u", "sandboxd.service", "SANDBOX_ID="+sb); !strings.Contains(journal, "exposed port refused a connection") {
		t.Errorf("the journal has no line of the refused connection:\n%s", journal)
	}

	// A port nothing listens on inside: exposed, its connections closed.
	ok(t, "port", sb, "8001")
	if out, code := curl(t, "", strings.Replace(path, "-8000.", "-8001.", 1), ""); code == 0 {
		t.Errorf("curl to a port nothing listens on in the sandbox: exit 0:\n%s", out)
	}

	ok(t, "freeze", sb)
	fails(t, 5, "it is frozen", "port", sb, "8002")
	ok(t, "thaw", sb)

	for p := 8002; p < 8016; p++ { // 16 in all
		ok(t, "port", sb, fmt.Sprint(p))
	}
	fails(t, 5, "it exposes 16 ports, the most a sandbox may", "port", sb, "8016")

	ok(t, "destroy", sb)
	gone(t, path)
	gone(t, strings.Replace(path, "-8000.", "-8015.", 1))
	if c, err := net.DialTimeout("tcp", addr, 5*time.Second); err == nil {
		c.Close()
		t.Errorf("%s still takes connections after the sandbox was destroyed", addr)
	}
}

// TestPortsOfAUsersSandbox: the socket of a port of a user's sandbox is
// that user's, who reaches the server through it (also after sandboxd
// restarts); another user does not.
func TestPortsOfAUsersSandbox(t *testing.T) {
	const member, other = "ports-a", "ports-other"
	uid, gid := groupMember(t, member)
	groupMember(t, other)
	reconfigure(t, "")
	memberProject(t, "ports", uid, gid, map[string]string{"f": "f\n"})
	asMember := func(args ...string) (string, string, int) { return ctlAs(t, member, args...) }
	sb := strings.TrimSpace(okAs(t, member, "create", "--quiet", "ports"))
	startServer(t, asMember, sb)

	path := strings.TrimSpace(okAs(t, member, "port", sb, "8000"))
	checkSocket(t, path, uid)
	for _, who := range []string{member, ""} {
		if out, code := curl(t, who, path, ""); code != 0 || !answers(out) {
			t.Errorf("curl through %s as %q: exit %d:\n%s", path, who, code, out)
		}
	}
	if out, code := curl(t, other, path, ""); code == 0 || strings.Contains(out, "marker.txt") {
		t.Errorf("curl through %s as %s answered: exit %d:\n%s", path, other, code, out)
	}
	// Not the owner: the sandbox is not there for it.
	if _, errOut, code := ctlAs(t, other, "port", sb, "8001"); code != 3 {
		t.Errorf("port of %s's sandbox as %s: exit %d: %s; want 3 (no such sandbox)", member, other, code, errOut)
	}

	// Through a sandbox of network host, whose 127.0.0.1 is the host's:
	// the daemon connects there as the owner, never as root, so that the
	// member reaches its own TCP port and not root's.
	okAs(t, member, "port", "--close", sb, "8000")
	own := strings.TrimSpace(okAs(t, member, "port", "--tcp", sb, "8000"))
	rootSB := strings.TrimSpace(ok(t, "create", "-q", "web"))
	defer ctl(t, "", "destroy", rootSB)
	startServer(t, func(args ...string) (string, string, int) { return ctl(t, "", args...) }, rootSB)
	roots := strings.TrimSpace(ok(t, "port", "--tcp", rootSB, "8000"))
	hostSB := strings.TrimSpace(okAs(t, member, "create", "--quiet", "--network", "host", "ports"))
	for _, tc := range []struct {
		addr, whose string
		answers     bool
	}{{own, member, true}, {roots, "root", false}} {
		_, port, _ := strings.Cut(tc.addr, ":")
		via := strings.TrimSpace(okAs(t, member, "port", hostSB, port))
		if out, code := curl(t, member, via, ""); (code == 0 && answers(out)) != tc.answers {
			t.Errorf("curl as %s through %s (network host) to %s's port %s: exit %d; want answered %v:\n%s", member, via, tc.whose, tc.addr, code, tc.answers, out)
		}
	}
	okAs(t, member, "destroy", hostSB)
	// Through the egress proxy of a sandbox whose allowlist names the
	// host's loopback: the daemon dials there as the owner too, so the
	// member's own port answers and root's does not.
	_, ownPort, _ := strings.Cut(own, ":")
	_, rootPort, _ := strings.Cut(roots, ":")
	proxied := strings.TrimSpace(okAs(t, member, "create", "--quiet", "--network", "allowlist",
		"--allow", "127.0.0.1:"+ownPort, "--allow", "127.0.0.1:"+rootPort, "ports"))
	for _, tc := range []struct {
		port, whose string
		answers     bool
	}{{ownPort, member, true}, {rootPort, "root", false}} {
		out, _, code := ctlAs(t, member, "exec", proxied, "--", "curl", "-sS", "-i", "-m", "10", "--noproxy", "", "-x", "http://127.0.0.1:3128", "http://127.0.0.1:"+tc.port+"/")
		// The proxy speaks HTTP/1.1 for the server's 1.0.
		listed := strings.HasPrefix(out, "HTTP/1.1 200 OK") && strings.Contains(out, "marker.txt")
		if (code == 0 && listed) != tc.answers {
			t.Errorf("curl as %s through its sandbox's egress proxy to %s's port %s: exit %d; want answered %v:\n%s", member, tc.whose, tc.port, code, tc.answers, out)
		}
	}
	okAs(t, member, "destroy", proxied)

	testbed.MustRun(t, "systemctl", "restart", "sandboxd.service")
	checkSocket(t, path, uid)
	if out, code := curl(t, member, path, ""); code != 0 || !answers(out) {
		t.Errorf("curl through %s as %s after sandboxd restarted: exit %d:\n%s", path, member, code, out)
	}
	fails(t, 5, "exposed already", "port", sb, "8000")

	okAs(t, member, "destroy", sb)
	gone(t, path)
}
