package integration

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	portroom "github.com/sandboxd/sandboxd/supervisor/ports"
	"github.com/sandboxd/sandboxd/tests/testbed"
)

// portHolder, run as the owner with n, write or quiet, and addresses
// (unix:PATH or tcp:HOST:PORT), opens n connections to each and never
// reads: it only peeks, once each is readable, whether it is served
// (bytes) or refused (closed), with write writes to the served ones as
// much as they take, says how many of each, and holds them until its
// stdin ends.
const portHolder = `import select, socket, sys, time
n, write, conns = int(sys.argv[1]), sys.argv[2] == 'write', []
for a in sys.argv[3:]:
    kind, where = a.split(':', 1)
    for _ in range(n):
        if kind == 'unix':
            s = socket.socket(socket.AF_UNIX)
            s.connect(where)
        else:
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            host, port = where.rsplit(':', 1)
            s.connect((host, int(port)))
        conns.append(s)
served = refused = 0
deadline = time.time() + 120
for s in conns:
    if not select.select([s], [], [], max(0, deadline - time.time()))[0]:
        print('timeout: a connection neither served nor refused after 120s', flush=True)
        sys.exit(1)
    try:
        got = s.recv(1, socket.MSG_PEEK)
    except OSError:
        got = b''
    if got:
        served += 1
        if not write:
            continue
        # Writes too, as much as is taken at once: the sandbox never
        # reads, so the other way's queues fill as well.
        s.setblocking(False)
        try:
            while s.send(b'y' * 65536):
                pass
        except OSError:
            pass
    else:
        refused += 1
print('served %d refused %d' % (served, refused), flush=True)
sys.stdin.read()
`

// holder is a running portHolder.
type holder struct {
	cmd             *exec.Cmd
	stdin           io.WriteCloser
	served, refused int
}

// holdPorts starts portHolder as member with n connections to each of
// addrs, writing to them with write, and waits until it says what became
// of them.
func holdPorts(t *testing.T, member, script string, n int, write bool, addrs []string) *holder {
	t.Helper()
	mode := "quiet"
	if write {
		mode = "write"
	}
	args := append([]string{"--reuid=" + member, "--regid=" + member, "--init-groups", "/usr/bin/python3", script, strconv.Itoa(n), mode}, addrs...)
	cmd := exec.Command("setpriv", args...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &holder{cmd: cmd, stdin: stdin}
	t.Cleanup(h.stop)
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if _, serr := fmt.Sscanf(line, "served %d refused %d", &h.served, &h.refused); err != nil || serr != nil {
		t.Fatalf("the holder of %d connections to each of %v said %q (%v)", n, addrs, line, err)
	}
	return h
}

// stop closes the holder's connections: it ends with its stdin.
func (h *holder) stop() {
	if h.stdin != nil {
		h.stdin.Close()
		h.stdin = nil
		h.cmd.Wait()
	}
}

// daemonSocketMemory is what the kernel holds in the queues of the
// daemon's (pid's) unix and TCP sockets here and its TCP sockets in the
// namespace at netns (a sandbox's): testbed.SocketQueues.
func daemonSocketMemory(t *testing.T, pid int, netns string) (bytes, sockets int) {
	t.Helper()
	bytes, sockets, err := testbed.SocketQueues(context.Background(), pid, true, []string{netns})
	if err != nil {
		t.Fatal(err)
	}
	return bytes, sockets
}

// vmRSS is pid's resident memory in bytes.
func vmRSS(t *testing.T, pid int) int {
	t.Helper()
	rss, err := testbed.VmRSS(pid)
	if err != nil {
		t.Fatal(err)
	}
	return rss
}

// startServers starts, as member in sandbox sb, python3 script with args,
// the servers called name, which say they listen with /tmp/NAME.ready,
// and waits until they do.
func startServers(t *testing.T, member, sb, name, script string, args ...string) {
	t.Helper()
	// Out of the command's process group (setsid), which ends with it;
	// the shell ends once the servers listen.
	sh := fmt.Sprintf("setsid python3 %s %s </dev/null >/tmp/%s.log 2>&1 & i=0; while [ ! -e /tmp/%s.ready ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done",
		script, strings.Join(args, " "), name, name)
	okAs(t, member, "exec", "--detach", sb, "--", "sh", "-c", sh)
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if _, _, code := ctlAs(t, member, "exec", sb, "--", "test", "-e", "/tmp/"+name+".ready"); code == 0 {
			return
		}
		if time.Now().After(deadline) {
			log, _, _ := ctlAs(t, member, "exec", sb, "--", "cat", "/tmp/"+name+".log")
			t.Fatalf("the %s in %s are not listening after 60s: %s", name, sb, log)
		}
	}
}

// processWith is the host pid of a process whose command line has marker.
func processWith(t *testing.T, marker string) int {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		dirs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
		for _, d := range dirs {
			if data, err := os.ReadFile(d); err == nil && strings.Contains(string(data), marker) {
				pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(d)))
				return pid
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no process with %q in its command line after 30s", marker)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestHostilePortsHoldBoundedMemory is issue 28's finding 5, as a member
// of group sandboxd: its sandbox serves 6 ports (one with a TCP address
// too) that write as fast as they can, and the member opens 64
// connections to each (384, the per-port cap), writes what they take and
// never reads. The daemon used to take them all and fill its sockets'
// autotuned queues both ways (measured: 384 served, 768 descriptors more,
// 813 MiB of RSS and queues, 2.1 MiB a connection), with no cap per
// owner. Now the owner's 257th connection is refused at once (and the
// journal says so), and what the daemon holds, its RSS's growth and its
// sockets' queues, stays within portroom.ConnMemory a connection
// (measured: 512 descriptors more, 65 MiB, 255 KiB a connection); the
// held connections closed, the owner's connections are served again.
func TestHostilePortsHoldBoundedMemory(t *testing.T) {
	const member, ports, perPort = "hostile-ports", 6, portroom.MaxConns
	uid, gid := groupMember(t, member)
	reconfigure(t, "")
	marker := fmt.Sprintf("writers-%d", time.Now().UnixNano())
	path := memberProject(t, "hostile-ports", uid, gid, map[string]string{"writers.py": testbed.PortWriters, "holder.py": portHolder})
	sb := strings.TrimSpace(okAs(t, member, "create", "--quiet", "hostile-ports"))
	var nums []string
	for p := range ports {
		nums = append(nums, strconv.Itoa(9000+p))
	}
	startServers(t, member, sb, "writers", filepath.Join(path, "writers.py"), append([]string{marker}, nums...)...)
	netns := fmt.Sprintf("/proc/%d/ns/net", processWith(t, marker))

	var addrs []string
	for i, p := range nums {
		if i == 0 {
			addrs = append(addrs, "tcp:"+strings.TrimSpace(okAs(t, member, "port", "--tcp", sb, p)))
			continue
		}
		addrs = append(addrs, "unix:"+strings.TrimSpace(okAs(t, member, "port", sb, p)))
	}
	pid := mainPID(t)
	fds0, rss0 := daemonFDs(t), vmRSS(t, pid)
	mem0, _ := daemonSocketMemory(t, pid, netns)

	h := holdPorts(t, member, filepath.Join(path, "holder.py"), perPort, true, addrs)
	// The queues fill as the writers write: wait until they hold at least
	// 32 KiB a served connection (the control: the writers write, so a
	// daemon that buffered more would show it) and then stop growing (no
	// growth over 2 s of reads), keeping the most seen.
	floor := h.served * 32 << 10
	var most, sockets, fds, rss int
	last, err := testbed.SettledQueues(context.Background(), floor, 2*time.Minute, func() (int, error) {
		mem, n := daemonSocketMemory(t, pid, netns)
		fds = max(fds, daemonFDs(t))
		rss = max(rss, vmRSS(t, pid))
		if held := mem + rss - rss0; held > most {
			most, sockets = held, n
		}
		return mem, nil
	})
	if err != nil {
		t.Fatalf("the daemon's socket queues for %d served connections: %v (are the writers writing?)", h.served, err)
	}
	held := most - mem0
	t.Logf("%d connections asked (%d ports × %d): %d served, %d refused; the daemon: %d descriptors (%d before), VmRSS %d MiB (%d before), %d sockets holding %d KiB in their queues at the end; RSS growth and queues %d KiB, %d KiB a served connection",
		ports*perPort, ports, perPort, h.served, h.refused, fds, fds0, rss>>20, rss0>>20, sockets, last>>10, held>>10, held/max(h.served, 1)>>10)

	if h.served != portroom.MaxConnsPerOwner || h.refused != ports*perPort-portroom.MaxConnsPerOwner {
		t.Errorf("%d connections served and %d refused; want the owner's cap, %d, served and the rest refused", h.served, h.refused, portroom.MaxConnsPerOwner)
	}
	if bound := portroom.MaxConnsPerOwner*portroom.ConnMemory + 16<<20; held > bound {
		t.Errorf("the daemon holds %d MiB more for the owner's connections (RSS and socket queues); want at most %d MiB (%d connections × %d KiB, and 16 MiB)", held>>20, bound>>20, portroom.MaxConnsPerOwner, portroom.ConnMemory>>10)
	}
	if fds > fds0+2*portroom.MaxConnsPerOwner+16 {
		t.Errorf("the daemon has %d descriptors open, %d before; want at most 2 a connection of the owner's cap (%d) more", fds, fds0, portroom.MaxConnsPerOwner)
	}
	if journal := testbed.MustRun(t, "journalctl", "--no-pager", "-o", "cat", "-u", "sandboxd.service", "SANDBOX_ID="+sb); !strings.Contains(journal, "the most an owner may have") {
		t.Errorf("the journal has no line of a connection refused past the owner's cap:\n%s", journal)
	}

	// Closed, the connections give their places back.
	h.stop()
	for deadline := time.Now().Add(60 * time.Second); daemonFDs(t) > fds0+8; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the daemon has %d descriptors open 60s after the connections closed, %d before them", daemonFDs(t), fds0)
		}
	}
	if again := holdPorts(t, member, filepath.Join(path, "holder.py"), 1, true, addrs); again.served != len(addrs) {
		t.Errorf("after the connections closed, %d of %d new ones served", again.served, len(addrs))
	}
}
