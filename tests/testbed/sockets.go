package testbed

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// PortWriters, run in a sandbox as `python3 -c PortWriters MARKER
// PORT...` (MARKER names the process on the host, in its command line),
// listens on each port of 127.0.0.1, says it listens with
// /tmp/writers.ready, and writes to every connection as fast as it is
// taken. Its own send queues are kept small: they are the sandbox's, and
// the tests and the bench are about the daemon's.
const PortWriters = `import selectors, socket, sys
sel = selectors.DefaultSelector()
for p in sys.argv[2:]:
    l = socket.socket()
    l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    l.bind(('127.0.0.1', int(p)))
    l.listen(512)
    l.setblocking(False)
    sel.register(l, selectors.EVENT_READ, None)
open('/tmp/writers.ready', 'w').close()
chunk = b'x' * 65536
while True:
    for key, _ in sel.select():
        if key.data is None:
            try:
                c, _ = key.fileobj.accept()
            except BlockingIOError:
                continue
            c.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 65536)
            c.setblocking(False)
            sel.register(c, selectors.EVENT_WRITE, 'w')
            continue
        try:
            key.fileobj.send(chunk)
        except BlockingIOError:
            pass
        except OSError:
            sel.unregister(key.fileobj)
            key.fileobj.close()
`

var skmem = regexp.MustCompile(`skmem:\(r(\d+),rb\d+,t(\d+),tb\d+,f(\d+),w(\d+)`)

// SocketQueues is what the kernel holds in the queues of pid's sockets:
// its TCP sockets (and unix ones, with unix) in this network namespace,
// and its TCP sockets in each namespace at netns (/proc/PID/ns/net of a
// sandbox's process); each socket's r+t+w+f of ss's skmem, which counts
// a send queue's bytes twice while they are in flight (an upper bound).
// It says too how many sockets it counted.
func SocketQueues(ctx context.Context, pid int, unix bool, netns []string) (bytes, sockets int, err error) {
	argvs := [][]string{{"ss", "-tmpnH"}}
	if unix {
		argvs = append(argvs, []string{"ss", "-xmpnH"})
	}
	for _, ns := range netns {
		argvs = append(argvs, []string{"nsenter", "--net=" + ns, "ss", "-tmpnH"})
	}
	mine := fmt.Sprintf("pid=%d,", pid)
	for _, argv := range argvs {
		out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).Output()
		if err != nil {
			return 0, 0, fmt.Errorf("reading the socket queues of pid %d: %s: %w", pid, strings.Join(argv, " "), err)
		}
		lines := strings.Split(string(out), "\n")
		for i, l := range lines {
			if !strings.Contains(l, mine) {
				continue
			}
			// ss puts skmem on the socket's line or, wrapped, the next.
			m := skmem.FindStringSubmatch(l)
			if m == nil && i+1 < len(lines) {
				m = skmem.FindStringSubmatch(lines[i+1])
			}
			if m == nil {
				continue
			}
			sockets++
			for _, v := range m[1:] {
				n, _ := strconv.Atoi(v)
				bytes += n
			}
		}
	}
	return bytes, sockets, nil
}

// VmRSS is pid's resident memory in bytes.
func VmRSS(pid int) (int, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("reading the memory of pid %d: %w", pid, err)
	}
	for _, l := range strings.Split(string(data), "\n") {
		if f := strings.Fields(l); len(f) == 3 && f[0] == "VmRSS:" {
			kb, _ := strconv.Atoi(f[1])
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("reading the memory of pid %d: no VmRSS in /proc/%d/status", pid, pid)
}

// ErrQueuesGrow is SettledQueues' error once its time is up.
var ErrQueuesGrow = errors.New("the socket queues still grow or hold less than asked")

// SettledQueues reads what socket queues hold (read, e.g. SocketQueues)
// every 250 ms until they hold at least floor bytes and then stop
// growing (by no more than 1% a reading over 8 readings, 2 s), and
// returns the last reading; past timeout, that reading and
// ErrQueuesGrow. Queues fill as fast as writers write, on a loaded
// machine too: what they settle at is waited for, not a fixed time.
func SettledQueues(ctx context.Context, floor int, timeout time.Duration, read func() (int, error)) (int, error) {
	deadline := time.Now().Add(timeout)
	last := 0
	for still := 0; ; {
		queues, err := read()
		if err != nil {
			return last, err
		}
		if queues > last+last/100 || queues < floor {
			still = 0
		} else {
			still++
		}
		last = queues
		if still >= 8 {
			return last, nil
		}
		if time.Now().After(deadline) {
			return last, fmt.Errorf("after %v, %d KiB (at least %d KiB asked): %w", timeout, last>>10, floor>>10, ErrQueuesGrow)
		}
		select {
		case <-ctx.Done():
			return last, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}
