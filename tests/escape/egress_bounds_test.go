package escape

import (
	"bufio"
	"context"
	"fmt"
	"github.com/sandboxd/sandboxd/supervisor/commands"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/runtime/egress"
	"github.com/sandboxd/sandboxd/runtime/nsinit"
	"github.com/sandboxd/sandboxd/supervisor"
	"github.com/sandboxd/sandboxd/tests/testbed"
)

// TestEgressTunnelsHoldBoundedMemory (issue 28, the egress proxy's side
// of finding 5): two sandboxes of one owner open 192 CONNECT tunnels
// each, through their proxies, to a test host that writes as fast as it
// can, and never read. The proxy used to serve all 384 (its cap was per
// sandbox) and let its sockets' queues grow with TCP's autotuning while
// the sandboxes did not read (measured: 384 served, 774 descriptors more,
// 1,747 MiB of RSS and queues, 4.6 MiB a tunnel). Now the owner's 257th
// tunnel is refused at once (503), and what the daemon holds, its RSS's
// growth and its sockets' queues, stays within egress.ConnMemory a tunnel
// (measured: 256 served, 128 refused, 518 descriptors more, 44 MiB, 176
// KiB a tunnel); the tunnels closed, a new one is served.
func TestEgressTunnelsHoldBoundedMemory(t *testing.T) {
	const perBox = 192
	addr, _ := netHost(t, "netdoc4", "198.51.100")
	target := addr + ":9100"
	streamOut(t, "netdoc4", addr, 9100)
	// The control: outside, a client gets the test host's stream.
	if out := outside(t, 0, "reading 4 MiB of the test host's stream", python(fmt.Sprintf(`
import socket
s = socket.create_connection(("%s", 9100), timeout=10)
n = 0
while n < 4 << 20:
    n += len(s.recv(65536))
print("read", n >= 4 << 20)
`, addr))); out != "read True\n" {
		t.Fatalf("the control: reading the test host's stream outside: %q", out)
	}

	env := newEnv(t)
	opts := supervisor.CreateOptions{Network: nsinit.NetworkAllowlist, Allow: []string{target}}
	boxes := []*box{newBoxIn(t, env, opts), newBoxIn(t, env, opts)}
	self := os.Getpid()
	var netns []string
	for _, b := range boxes {
		netns = append(netns, fmt.Sprintf("/proc/%d/ns/net", boxInitPID(t, b)))
	}
	fds0, rss0 := countFDs(t), selfRSS(t)
	mem0, _ := socketMemory(t, self, netns)

	served, refused := 0, 0
	var stops []func()
	for _, b := range boxes {
		held, stop := holdTunnels(t, b, target, perBox)
		stops = append(stops, stop)
		for _, f := range strings.Fields(strings.TrimPrefix(held, "held ")) {
			how, n, _ := strings.Cut(f, "=")
			count, _ := strconv.Atoi(n)
			switch how {
			case "200":
				served += count
			case "503":
				refused += count
			default:
				t.Errorf("the sandbox's client: %d tunnels %s", count, how)
			}
		}
	}
	// The queues fill as the test host writes: wait until they hold at
	// least 32 KiB a served tunnel (the control: the host writes, so a
	// daemon that buffered more would show it) and then stop growing (no
	// growth over 2 s of reads), keeping the most seen.
	floor := served * 32 << 10
	var most, sockets, fds, rss int
	last, err := testbed.SettledQueues(context.Background(), floor, 2*time.Minute, func() (int, error) {
		mem, n := socketMemory(t, self, netns)
		fds = max(fds, countFDs(t))
		rss = max(rss, selfRSS(t))
		if held := mem + rss - rss0; held > most {
			most, sockets = held, n
		}
		return mem, nil
	})
	if err != nil {
		t.Fatalf("the daemon's socket queues for %d served tunnels: %v (is the test host writing?)", served, err)
	}
	held := most - mem0
	t.Logf("%d tunnels asked (2 sandboxes × %d): %d served, %d refused; the daemon: %d descriptors (%d before), VmRSS %d MiB (%d before), %d sockets holding %d KiB in their queues at the end; RSS growth and queues %d KiB, %d KiB a served tunnel",
		2*perBox, perBox, served, refused, fds, fds0, rss>>20, rss0>>20, sockets, last>>10, held>>10, held/max(served, 1)>>10)

	if served != egress.MaxConnsPerOwner || refused != 2*perBox-egress.MaxConnsPerOwner {
		t.Errorf("ESCAPE: %d tunnels served and %d refused; want the owner's cap, %d, served and the rest refused", served, refused, egress.MaxConnsPerOwner)
	}
	if bound := egress.MaxConnsPerOwner*egress.ConnMemory + 16<<20; held > bound {
		t.Errorf("ESCAPE: the daemon holds %d MiB more for the owner's tunnels (RSS and socket queues); want at most %d MiB (%d tunnels × %d KiB, and 16 MiB)", held>>20, bound>>20, egress.MaxConnsPerOwner, egress.ConnMemory>>10)
	}
	if fds > fds0+2*egress.MaxConnsPerOwner+32 {
		t.Errorf("ESCAPE: the daemon has %d descriptors open, %d before; want at most 2 a tunnel of the owner's cap (%d) more", fds, fds0, egress.MaxConnsPerOwner)
	}

	// Closed, the tunnels give their places back.
	for _, stop := range stops {
		stop()
	}
	for deadline := time.Now().Add(60 * time.Second); countFDs(t) > fds0+8; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the daemon has %d descriptors open 60s after the tunnels closed, %d before them", countFDs(t), fds0)
		}
	}
	if out, res := boxes[1].run(t, nobody, clientScript("proxy", target, 1)); out != "held 200=1\n" {
		t.Errorf("a tunnel once the owner's closed: %v %q", res, out)
	}
}

// holdTunnels runs clientScript in b: n CONNECTs to target, held open and
// never read until stop. It returns the client's "held" line.
func holdTunnels(t *testing.T, b *box, target string, n int) (held string, stop func()) {
	t.Helper()
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd, err := b.env.Commands.Exec(ctx, b.sb.ID, commands.ExecOptions{
		Argv: []string{"/bin/sh", "-c", clientScript("proxy", target, n)}, UID: nobody,
		Stdio: []*os.File{inR, outW, outW}, Timeout: 3 * time.Minute,
	})
	inR.Close()
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
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
	stop = sync.OnceFunc(func() {
		inW.Close() // the client lets go
		for range lines {
		}
		outR.Close()
		if res := cmd.Result(); res.How != nsinit.Exited || res.Code != 0 {
			t.Errorf("the sandbox's client: %v", res)
		}
	})
	t.Cleanup(stop)
	deadline := time.After(90 * time.Second)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				stop()
				t.Fatalf("the sandbox's client ended before holding its tunnels: %v", cmd.Result())
			}
			if strings.HasPrefix(l, "held ") {
				return l, stop
			}
			t.Log("client: " + l)
		case <-deadline:
			stop()
			t.Fatalf("the sandbox's client did not open its %d tunnels in 90s", n)
		}
	}
}

// streamOut serves addr:port in the network namespace name: it writes
// to every connection as fast as the connection takes it.
func streamOut(t *testing.T, name, addr string, port int) {
	t.Helper()
	serveOnHost(t, "the test host's writer", name, `ls.setblocking(False)
chunk = b"x" * 65536
while True:
    for key, _ in sel.select():
        if key.fileobj is ls:
            try:
                c, _ = ls.accept()
            except OSError:
                continue
            c.setblocking(False)
            sel.register(c, selectors.EVENT_WRITE)
            continue
        try:
            key.fileobj.send(chunk)
        except BlockingIOError:
            pass
        except OSError:
            sel.unregister(key.fileobj)
            key.fileobj.close()
`, addr, port)
}

// socketMemory is what the kernel holds in the queues of pid's TCP
// sockets, in this network namespace and in those at netns (the
// sandboxes'): testbed.SocketQueues.
func socketMemory(t *testing.T, pid int, netns []string) (bytes, sockets int) {
	t.Helper()
	bytes, sockets, err := testbed.SocketQueues(context.Background(), pid, false, netns)
	if err != nil {
		t.Fatal(err)
	}
	return bytes, sockets
}

// selfRSS is this process's, the daemon's, resident memory in bytes.
func selfRSS(t *testing.T) int {
	t.Helper()
	rss, err := testbed.VmRSS(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	return rss
}
