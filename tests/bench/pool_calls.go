package main

// The pool part's calls to the daemon and the floors it measures beside
// them: ListPools, the wait for a full pool, a call that does nothing,
// and a bbolt commit's two syncs without bbolt.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/godbus/dbus/v5"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/cowfs/changewatch"
	"github.com/sandboxd/sandboxd/sandboxd1"
)

// warmPool is one entry of ListPools' answer.
type warmPool = sandboxd1.Pool

// poolOf is the pool of project that ListPools gives (the bench, root,
// is its only owner), and whether there is one.
func (d *daemon) poolOf(ctx context.Context, project string) (warmPool, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	var text string
	if err := d.manager().CallWithContext(ctx, sandboxd1.ManagerInterface+"."+sandboxd1.MethodListPools, 0).Store(&text); err != nil {
		return warmPool{}, false, fmt.Errorf("listing the warm pools: %w", err)
	}
	var pools []warmPool
	if err := json.Unmarshal([]byte(text), &pools); err != nil {
		return warmPool{}, false, fmt.Errorf("listing the warm pools: %w: %q", err, text)
	}
	for _, p := range pools {
		if p.Project == project {
			return p, true, nil
		}
	}
	return warmPool{}, false, nil
}

// poolPoll is how often waitFull asks: often enough for a refill rate
// to a few percent, rarely enough that the asking costs little.
const poolPoll = 20 * time.Millisecond

// poolStall is how long a pool may make no progress before waitFull
// gives up on it.
const poolStall = time.Minute

// waitFull polls ListPools until project's pool has as many ready as
// its size, and returns it then and when that was seen. A pool whose
// ready count has not grown for poolStall is an error that says how it
// stands.
func (d *daemon) waitFull(ctx context.Context, project string) (warmPool, time.Time, error) {
	last, lastChange := -1, time.Now()
	for {
		p, ok, err := d.poolOf(ctx, project)
		now := time.Now()
		if err != nil {
			return p, now, err
		}
		if ok && p.Size > 0 && p.Ready >= p.Size {
			return p, now, nil
		}
		if p.Ready != last {
			last, lastChange = p.Ready, now
		}
		if now.Sub(lastChange) > poolStall {
			if !ok {
				return p, now, fmt.Errorf("no warm pool of %s listed %v after its first create: %s", project, poolStall, d.journal(ctx))
			}
			return p, now, fmt.Errorf("the warm pool of %s made no progress for %v: %+v; the daemon's journal: %s", project, poolStall, p, d.journal(ctx))
		}
		select {
		case <-ctx.Done():
			return p, now, ctx.Err()
		case <-time.After(poolPoll):
		}
	}
}

// pingPeer is a call the daemon's bus library answers itself: the floor
// of any call to the daemon (dbus-daemon's two hops and godbus's
// dispatch), with nothing of sandboxd's in it.
const pingPeer = "org.freedesktop.DBus.Peer.Ping"

// pings times n Pings of the daemon, one after another.
func (d *daemon) pings(ctx context.Context, n int) (series, error) {
	var s series
	m := d.manager()
	for range n {
		dt, err := timed(func() error { return m.CallWithContext(ctx, pingPeer, 0).Err })
		if err != nil {
			return s, fmt.Errorf("pinging sandboxd: %w", err)
		}
		s = append(s, dt)
	}
	return s, nil
}

// pingParallel has parallelClients clients ping the daemon n times in
// all, at once.
func pingParallel(ctx context.Context, n int) (parallelRun, error) {
	var mu sync.Mutex
	var run parallelRun
	left := n
	start := time.Now()
	err := eachClient(ctx, func(ctx context.Context, conn *dbus.Conn) error {
		m := conn.Object(sandboxd1.BusName, sandboxd1.ManagerPath)
		for {
			mu.Lock()
			if left == 0 {
				mu.Unlock()
				return nil
			}
			left--
			mu.Unlock()
			t0 := time.Now()
			if err := m.CallWithContext(ctx, pingPeer, 0).Err; err != nil {
				return fmt.Errorf("pinging sandboxd: %w", err)
			}
			end := time.Now()
			mu.Lock()
			run.calls = append(run.calls, timedCall{end: end, took: end.Sub(t0)})
			mu.Unlock()
		}
	})
	run.elapsed = time.Since(start)
	return run, err
}

// commitFloor times n rounds of what a bbolt commit syncs, without
// bbolt: a 4 KiB write and fdatasync, twice (its pages, then its meta
// page), in a file of the daemon's state directory. A claim writes its
// record (renamed, its TTL started) at least once.
func commitFloor(n int) (s series, err error) {
	path := filepath.Join(benchStateDir, "bench-commit-floor")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("the commit's floor: %w", err)
	}
	defer func() {
		f.Close()
		if rerr := os.Remove(path); rerr != nil && err == nil {
			err = rerr
		}
	}()
	page := make([]byte, 4096)
	for i := range n + 1 { // the first, untimed, allocates the file's blocks
		dt, err := timed(func() error {
			for _, off := range []int64{4096, 0} {
				page[0] = byte(i)
				if _, err := f.WriteAt(page, off); err != nil {
					return err
				}
				if err := unix.Fdatasync(int(f.Fd())); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("the commit's floor: %w", err)
		}
		if i > 0 {
			s = append(s, dt)
		}
	}
	return s, nil
}

// warmTicks is where the machine's CPU time went up to a moment: the
// scale part's, dbus-daemon's (every call and every unit signal goes
// through it), and the testbed's processes' (procs: each one's own and
// its waited-for children's, the bench's aside).
type warmTicks struct {
	cpuTicks
	dbus  uint64
	procs map[int]uint64
}

// cpuReader reads warmTicks of a daemon and of the bus's daemon.
type cpuReader struct{ daemon, dbus int }

func newCPUReader(ctx context.Context, d *daemon) (cpuReader, error) {
	pid, _, err := d.memory(ctx)
	if err != nil {
		return cpuReader{}, err
	}
	r := cpuReader{daemon: pid}
	out, err := tool(ctx, "systemctl", "show", "-P", "MainPID", "dbus.service")
	if err != nil {
		return r, fmt.Errorf("finding dbus-daemon's pid: %w", err)
	}
	r.dbus, _ = strconv.Atoi(strings.TrimSpace(out)) // 0: not counted
	return r, nil
}

func (r cpuReader) read() (warmTicks, error) {
	c, err := readCPU(r.daemon)
	if err != nil {
		return warmTicks{}, err
	}
	w := warmTicks{cpuTicks: c}
	if r.dbus > 0 {
		if w.dbus, err = procTicks(r.dbus); err != nil {
			return w, err
		}
	}
	w.procs, err = namespaceTicks()
	return w, err
}

// namespaceTicks is the CPU time of each process /proc lists (the
// testbed's, in its pid namespace; the bench's own aside): utime, stime,
// and its waited-for children's, so that a process that ended in a window
// is counted in its parent's.
func namespaceTicks() (map[int]uint64, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	self := os.Getpid()
	m := make(map[int]uint64, len(entries))
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		data, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // it ended meanwhile: its parent's children's count has it
		}
		s := string(data)
		i := strings.LastIndexByte(s, ')')
		if i < 0 || i+2 > len(s) {
			continue
		}
		f := strings.Fields(s[i+2:])
		if len(f) < 15 {
			continue
		}
		var t uint64
		for _, v := range f[11:15] { // utime, stime, cutime, cstime
			n, _ := strconv.ParseUint(v, 10, 64)
			t += n
		}
		m[pid] = t
	}
	return m, nil
}

// procsDelta is the testbed's processes' CPU ticks from a to b: each
// one's growth, a new one's whole, less what one that ended had at a
// (its parent's children's count took all of it).
func procsDelta(a, b map[int]uint64) uint64 {
	var sumB, sumA uint64
	for _, t := range b {
		sumB += t
	}
	for _, t := range a {
		sumA += t
	}
	if sumB < sumA {
		return 0
	}
	return sumB - sumA
}

// cpuCost is CPU time per operation: the whole machine's busy time
// (other work on the machine in it, and the kernel's threads: btrfs's
// transactions and cleaner, writeback), the testbed's processes', and of
// these sandboxd's (with the kernel's work in its calls, such as the
// snapshots' commits), systemd's and dbus-daemon's.
type cpuCost struct {
	machine, testbed, daemon, systemd, dbus time.Duration
	n                                       int // operations it is divided by
}

func costPer(a, b warmTicks, n int) cpuCost {
	per := func(t uint64) time.Duration { return time.Duration(t) * clockTick / time.Duration(max(n, 1)) }
	return cpuCost{
		machine: per((b.total - a.total) - (b.idle - a.idle)),
		testbed: per(procsDelta(a.procs, b.procs)),
		daemon:  per(b.daemon - a.daemon),
		systemd: per(b.systemd - a.systemd),
		dbus:    per(b.dbus - a.dbus),
		n:       n,
	}
}

func (c cpuCost) String() string {
	return fmt.Sprintf("machine %s ms; the testbed's processes %s ms, of which sandboxd %s, systemd %s, dbus-daemon %s",
		ms(c.machine), ms(c.testbed), ms(c.daemon), ms(c.systemd), ms(c.dbus))
}

// cpuWindow measures fn's CPU time, divided by the operations fn says
// it did.
func (r cpuReader) window(fn func() (int, error)) (cpuCost, error) {
	a, err := r.read()
	if err != nil {
		return cpuCost{}, err
	}
	n, ferr := fn()
	b, err := r.read()
	if ferr != nil {
		return cpuCost{}, ferr
	}
	if err != nil {
		return cpuCost{}, err
	}
	return costPer(a, b, n), nil
}

// scanRuns is how many times scanWriters runs at each live count.
const scanRuns = 10

// writerScan is what the pool does before each member's snapshot, beside
// the fanotify mark: changewatch.Writers of the project, a scan of every
// process's descriptors and mappings in /proc; and how many processes
// /proc listed.
type writerScan struct {
	s     series
	procs int
}

// scanWriters times changewatch.Writers of the project at dir, untimed
// once first.
func scanWriters(dir string) (w writerScan, err error) {
	for i := range scanRuns + 1 {
		dt, err := timed(func() error {
			_, err := changewatch.Writers(dir)
			return err
		})
		if err != nil {
			return w, fmt.Errorf("scanning /proc for the project's writers: %w", err)
		}
		if i > 0 {
			w.s = append(w.s, dt)
		}
	}
	procs, err := namespaceTicks()
	w.procs = len(procs) + 1 // the bench's own
	return w, err
}
