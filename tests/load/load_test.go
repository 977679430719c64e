// Package load puts the installed sandboxd under load: N clients, each on
// its own connection to the system bus, create a sandbox, run a command in
// it with their own pipes, read its change list and destroy it, over and
// over, all at once. Afterwards every volume, scope, runtime directory,
// file descriptor and byte of the daemon's memory must have come back.
//
// The short variant runs in `make test`. The long one (-soak, `make soak`)
// doubles N until the daemon no longer holds it and prints a table of
// what each N cost.
package load

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/sandboxd/sandboxd/sandboxd1"
	"github.com/sandboxd/sandboxd/tests/testbed"
)

var (
	soak       = flag.Bool("soak", false, "run the long load test (make soak): N doubles until the daemon no longer holds it")
	soakCycles = flag.Int("soak.cycles", 16, "soak: cycles (create, exec, diff, destroy) per client in each round")
	soakMaxN   = flag.Int("soak.max", 512, "soak: the largest N tried")
	soakBudget = flag.Duration("soak.budget", 30*time.Minute, "soak: no round starts that would end after this long")
)

// daemonBin is built on the host before the testbed starts, into the
// repository (which the testbed shows at the same path). It has a name of
// its own: the integration tests rebuild bin/test/sandboxd, and must not
// swap the binary under this package's daemon.
var daemonBin string

func TestMain(m *testing.M) {
	wd, _ := os.Getwd()
	root := filepath.Dir(filepath.Dir(wd)) // tests/load -> repository
	daemonBin = filepath.Join(root, "bin", "test", "sandboxd-load")
	if !testbed.Inside() {
		build := exec.Command("go", "build", "-o", daemonBin, "./cmd/sandboxd")
		build.Dir = root
		if out, err := build.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "building sandboxd: %v\n%s", err, out)
			os.Exit(2)
		}
	}
	testbed.Main(m)
}

// poolRoot is the daemon's pool: a directory of the testbed's btrfs.
func poolRoot(tb *testbed.Info) string { return filepath.Join(tb.Btrfs.Mount, "sandboxd") }

// runtimeDir holds a directory per live sandbox (its init's socket).
const runtimeDir = "/run/sandboxd"

// busLimits raises the bus's cap on connections of one uid (256 by
// default). Every client here is root, where real clients are users of
// their own; without it the soak would measure the bus's per-user cap,
// not the daemon. The other limits (replies, queued bytes and
// descriptors per connection) stay as they ship.
const busLimits = `<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-BUS Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <limit name="max_connections_per_user">4096</limit>
  <limit name="max_completed_connections">4096</limit>
</busconfig>
`

// installed is set once the daemon is installed in this testbed.
var installed bool

// install puts sandboxd in the testbed as a sysadmin would and starts it
// (testbed.InstallService), with this package's binary, caps off and the
// bus limit above.
func install(t *testing.T) *testbed.Info {
	t.Helper()
	tb := testbed.Require(t)
	if installed {
		return tb
	}
	repo := filepath.Dir(filepath.Dir(filepath.Dir(daemonBin)))
	if err := os.WriteFile(filepath.Join(tb.Btrfs.Project, "index.html"), []byte("<h1>web</h1>\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	testbed.InstallService(t, repo, daemonBin, config(tb), map[string]string{"zz-sandboxd-load-limits.conf": busLimits})
	installed = true
	return tb
}

// config is the daemon's sandboxd.toml: the testbed's btrfs, project
// "web", and no admission caps nor per-user bounds. Every client is root,
// so the default cap of 32 sandboxes per user (and the memory promised,
// and a quarter of the tasks for one user) would refuse the load itself;
// the caps have tests of their own. sandboxd.slice's bounds stay.
func config(tb *testbed.Info) string {
	return fmt.Sprintf(`
[limits]
max_sandboxes = 0
max_sandboxes_per_user = 0
max_memory = 0
user_memory_max = 0
user_tasks_max = 0
[storage]
backend = "btrfs"
[storage.btrfs]
root = %q
[[project]]
name = "web"
path = %q
`, poolRoot(tb), tb.Btrfs.Project)
}

// The calls a cycle makes, in order.
const (
	opConnect = "connect"
	opCreate  = "create"
	opExec    = "exec" // the Exec call until its CommandExited
	opDiff    = "diff"
	opDestroy = "destroy"
)

var ops = []string{opCreate, opExec, opDiff, opDestroy}

// callTimeout bounds one call (and the wait for a CommandExited), so that
// a daemon that hangs fails the round instead of stalling it.
const callTimeout = time.Minute

// client is one agent: its own bus connection, its own files.
type client struct {
	conn    *dbus.Conn
	signals chan *dbus.Signal
	null    *os.File
}

func dial() (*client, error) {
	conn, err := dbus.ConnectSystemBus()
	if err != nil {
		return nil, err
	}
	c := &client{conn: conn, signals: make(chan *dbus.Signal, 16)}
	conn.Signal(c.signals)
	if err := conn.AddMatchSignal(dbus.WithMatchInterface(sandboxd1.SandboxInterface), dbus.WithMatchMember("CommandExited")); err != nil {
		conn.Close()
		return nil, err
	}
	if c.null, err = os.Open("/dev/null"); err != nil {
		conn.Close()
		return nil, err
	}
	return c, nil
}

func (c *client) close() {
	c.conn.Close()
	c.null.Close()
}

// sample is one call's outcome.
type sample struct {
	op  string
	d   time.Duration
	err error
}

// cycle creates a sandbox, runs a command writing a file in it, checks
// that its change list shows the file, and destroys it. It reports each
// call; after a failed create nothing else is tried, after any later
// failure the sandbox is still destroyed.
func (c *client) cycle(ctx context.Context, token string, report func(sample)) {
	timed := func(op string, fn func(ctx context.Context) error) error {
		ctx, cancel := context.WithTimeout(ctx, callTimeout)
		defer cancel()
		begin := time.Now()
		err := fn(ctx)
		report(sample{op: op, d: time.Since(begin), err: err})
		return err
	}
	var id string
	var object dbus.ObjectPath
	err := timed(opCreate, func(ctx context.Context) error {
		return c.conn.Object(sandboxd1.BusName, sandboxd1.ManagerPath).CallWithContext(ctx, sandboxd1.ManagerInterface+".CreateSandbox", 0,
			"web", map[string]dbus.Variant{}).Store(&id, &object)
	})
	if err != nil {
		return
	}
	sb := c.conn.Object(sandboxd1.BusName, object)
	if timed(opExec, func(ctx context.Context) error { return c.exec(ctx, sb, token) }) == nil {
		_ = timed(opDiff, func(ctx context.Context) error {
			var changes []sandboxd1.ChangeEntry
			if err := sb.CallWithContext(ctx, sandboxd1.SandboxInterface+".Diff", 0).Store(&changes); err != nil {
				return err
			}
			if len(changes) != 1 || changes[0].Kind != "added" || strings.TrimPrefix(changes[0].Path, "/") != "load.txt" {
				return fmt.Errorf("Diff of %s: %v; want load.txt added", id, changes)
			}
			return nil
		})
	}
	_ = timed(opDestroy, func(ctx context.Context) error {
		return c.conn.Object(sandboxd1.BusName, sandboxd1.ManagerPath).CallWithContext(ctx, sandboxd1.ManagerInterface+".DestroySandbox", 0, id).Err
	})
}

// exec runs a script that writes token to a file of the project and reads
// it back, with a pipe of the client's own as its stdout and stderr, and
// waits for its CommandExited.
func (c *client) exec(ctx context.Context, sb dbus.BusObject, token string) error {
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	defer r.Close()
	out := make(chan []byte, 1)
	go func() { b, _ := io.ReadAll(r); out <- b }()
	var command string
	err = sb.CallWithContext(ctx, sandboxd1.SandboxInterface+".Exec", 0,
		[]string{"/bin/sh", "-c", `echo "$1" > load.txt && cat load.txt`, "sh", token}, map[string]dbus.Variant{},
		dbus.UnixFD(c.null.Fd()), dbus.UnixFD(w.Fd()), dbus.UnixFD(w.Fd())).Store(&command)
	w.Close() // the daemon has its copies once the call is answered
	if err != nil {
		return err
	}
	for {
		select {
		case s := <-c.signals:
			if s.Name != sandboxd1.SandboxInterface+".CommandExited" || s.Path != sb.Path() || len(s.Body) < 3 || s.Body[0] != command {
				continue // a late signal of an earlier, timed-out command
			}
			how, _ := s.Body[1].(string)
			status, _ := s.Body[2].(int32)
			if how != "exited" || status != 0 {
				return fmt.Errorf("command %s in %s: %s %d", command, sb.Path(), how, status)
			}
			select {
			case b := <-out:
				if string(b) != token+"\n" {
					return fmt.Errorf("command %s in %s wrote %q; want %q", command, sb.Path(), b, token+"\n")
				}
				return nil
			case <-ctx.Done():
				return fmt.Errorf("command %s in %s: its output did not end: %w", command, sb.Path(), ctx.Err())
			}
		case <-ctx.Done():
			return fmt.Errorf("no CommandExited for command %s of %s: %w", command, sb.Path(), ctx.Err())
		}
	}
}

// series is the durations of one kind of call.
type series []time.Duration

// percentile is the nearest-rank p-th percentile (0 < p < 1). With fewer
// than 100 calls, p99 is the slowest one.
func (s series) percentile(p float64) time.Duration {
	if len(s) == 0 {
		return 0
	}
	c := slices.Clone(s)
	slices.Sort(c)
	return c[int(math.Ceil(p*float64(len(c))))-1]
}

// round is what N clients did in one go.
type round struct {
	n, cycles int
	lat       map[string]series // of calls that succeeded
	calls     int
	errors    int
	firstErrs []string
	elapsed   time.Duration
	after     usage // the daemon, once everything came back
}

func (r *round) add(s sample) {
	r.calls++
	if s.err != nil {
		r.errors++
		if len(r.firstErrs) < 5 {
			r.firstErrs = append(r.firstErrs, s.op+": "+s.err.Error())
		}
		return
	}
	r.lat[s.op] = append(r.lat[s.op], s.d)
}

func (r *round) errorRate() float64 { return float64(r.errors) / float64(max(r.calls, 1)) }

// pcts is "p50 / p99" of op, in milliseconds.
func (r *round) pcts(op string) string {
	s := r.lat[op]
	if len(s) == 0 {
		return "–"
	}
	return ms(s.percentile(0.5)) + " / " + ms(s.percentile(0.99))
}

func ms(d time.Duration) string {
	v := float64(d) / float64(time.Millisecond)
	switch {
	case v < 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.0f", v)
	}
}

// run has n clients do cycles cycles each, all at once: they connect
// first, then start together.
func run(ctx context.Context, n, cycles int) *round {
	r := &round{n: n, cycles: cycles, lat: map[string]series{}}
	var mu sync.Mutex
	report := func(s sample) {
		mu.Lock()
		r.add(s)
		mu.Unlock()
	}
	clients := make([]*client, n)
	var wg sync.WaitGroup
	for i := range clients {
		wg.Go(func() {
			c, err := dial()
			report(sample{op: opConnect, err: err})
			clients[i] = c
		})
	}
	wg.Wait()
	begin := time.Now()
	for i, c := range clients {
		if c == nil {
			continue
		}
		wg.Go(func() {
			defer c.close()
			for j := range cycles {
				if ctx.Err() != nil {
					report(sample{op: opCreate, err: ctx.Err()})
					return
				}
				c.cycle(ctx, fmt.Sprintf("client-%d-cycle-%d", i, j), report)
			}
		})
	}
	wg.Wait()
	r.elapsed = time.Since(begin)
	return r
}

// usage is what the daemon holds.
type usage struct {
	pid     int
	fds     int
	rss     uint64 // VmRSS, bytes
	threads int
}

func (u usage) String() string {
	return fmt.Sprintf("%d fds, VmRSS %s, %d threads", u.fds, mib(u.rss), u.threads)
}

func mib(b uint64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

func daemonUsage(t *testing.T) usage {
	t.Helper()
	pid, err := strconv.Atoi(strings.TrimSpace(testbed.MustRun(t, "systemctl", "show", "-P", "MainPID", "sandboxd.service")))
	if err != nil || pid == 0 {
		t.Fatalf("sandboxd's MainPID: %v (%d)", err, pid)
	}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	u := usage{pid: pid, fds: len(fds)}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) == 3 && f[0] == "VmRSS:":
			kb, _ := strconv.ParseUint(f[1], 10, 64)
			u.rss = kb << 10
		case len(f) == 2 && f[0] == "Threads:":
			u.threads, _ = strconv.Atoi(f[1])
		}
	}
	if u.rss == 0 {
		t.Fatalf("no VmRSS in /proc/%d/status", pid)
	}
	return u
}

// leftovers lists what exists of sandboxes: entries of the pool's root
// (a leftover of a half-done delete, ".tmp-del-...", counts too), entries
// of the runtime directory, sandbox scopes in any state, and the
// sandboxes the daemon lists.
func leftovers(t *testing.T, tb *testbed.Info, conn *dbus.Conn) []string {
	t.Helper()
	var left []string
	for _, dir := range []string{poolRoot(tb), runtimeDir} {
		entries, err := os.ReadDir(dir)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		for _, e := range entries {
			// An owner's cache (cache-u<uid>, or cachefs-u<uid> where it
			// is a filesystem of its own) outlives its sandboxes, by
			// design; the exposed ports' directory stays, empty.
			if dir == poolRoot(tb) && (strings.HasPrefix(e.Name(), "cache-u") || strings.HasPrefix(e.Name(), "cachefs-u")) {
				continue
			}
			if dir == runtimeDir && e.Name() == "ports" {
				if sockets, _ := os.ReadDir(filepath.Join(dir, "ports")); len(sockets) == 0 {
					continue
				}
			}
			left = append(left, filepath.Join(dir, e.Name()))
		}
	}
	out := testbed.MustRun(t, "systemctl", "list-units", "--all", "--plain", "--no-legend", "sandbox-*.scope")
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			left = append(left, "unit "+f[0])
		}
	}
	var list []sandboxd1.ListEntry
	if err := conn.Object(sandboxd1.BusName, sandboxd1.ManagerPath).Call(sandboxd1.ManagerInterface+".ListSandboxes", 0).Store(&list); err != nil {
		t.Fatalf("ListSandboxes: %v", err)
	}
	for _, e := range list {
		left = append(left, "listed "+e.ID+" ("+e.State+")")
	}
	return left
}

// fdSlack is how many more descriptors than before the daemon may hold
// once a round is over: a leak of one per cycle shows as N×cycles.
const fdSlack = 4

// settle waits (up to 30 s: a scope's removal and the descriptors of
// its init's socket are let go just after the destroy's reply) until
// nothing of any sandbox is left and, unless anyFDs, the daemon's
// descriptors are back within fdSlack of base, and returns what the
// daemon holds then. What is still left at the deadline fails the test.
func settle(t *testing.T, tb *testbed.Info, conn *dbus.Conn, base usage, anyFDs bool) usage {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		left := leftovers(t, tb, conn)
		u := daemonUsage(t)
		if u.pid != base.pid {
			t.Fatalf("sandboxd restarted under load (pid %d, was %d):\n%s", u.pid, base.pid, journal())
		}
		fdsBack := anyFDs || u.fds <= base.fds+fdSlack
		if len(left) == 0 && fdsBack {
			return u
		}
		if time.Now().After(deadline) {
			if len(left) > 0 {
				t.Errorf("30 s after the last destroy, %d things of sandboxes are left: %s", len(left), strings.Join(left[:min(len(left), 10)], ", "))
			}
			if !fdsBack {
				t.Errorf("sandboxd holds %d descriptors; %d before the load (slack %d): a leak:\n%s", u.fds, base.fds, fdSlack, fdList(u.pid))
			}
			return u
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// fdList is what the daemon's descriptors point at, counted by target.
func fdList(pid int) string {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	entries, _ := os.ReadDir(dir)
	counts := map[string]int{}
	for _, e := range entries {
		target, _ := os.Readlink(filepath.Join(dir, e.Name()))
		if i := strings.IndexByte(target, '['); i > 0 {
			target = target[:i] // socket:[123] -> socket:
		}
		counts[target]++
	}
	var lines []string
	for target, n := range counts {
		lines = append(lines, fmt.Sprintf("%5d %s", n, target))
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

func journal() string {
	out, _ := exec.Command("journalctl", "--no-pager", "-n", "40", "-u", "sandboxd.service").CombinedOutput()
	return string(out)
}

// warmUp makes and destroys a few sandboxes, one at a time: the first
// create starts what lives as long as the daemon (its reaper, the
// systemd signal subscription, journald's stream), which is not a leak.
func warmUp(t *testing.T) {
	t.Helper()
	r := run(context.Background(), 1, 3)
	if r.errors > 0 {
		t.Fatalf("warm-up: %d of %d calls failed: %s", r.errors, r.calls, strings.Join(r.firstErrs, "; "))
	}
}

// Short variant: what it runs, and the memory it may keep.
const (
	shortN      = 8
	shortCycles = 10
	// rssBound is how much more VmRSS than before the load (after the
	// warm-up) the daemon may keep after the first round. Measured on
	// the 2-core testbed in four runs: 14.6-14.8 MiB before, +4.2 to
	// +4.3 MiB after round 1 (the Go heap grown for 8 calls at once and
	// not given back at once, the stacks of the OS threads added for
	// concurrent blocking calls, code first run under load). 16 MiB is
	// about four times that, and a leak of 150 KiB a cycle passes it.
	rssBound = 16 << 20
	// rssGrowth is how much a second identical round may add to the
	// first's: it needs no more heap or threads than the first did, so
	// what grows here is what was kept. Measured: -0.1 to 0.0 MiB in
	// four runs. 2 MiB is twenty times that spread; a leak of 26 KiB a
	// cycle (a record and its buffers) passes it.
	rssGrowth = 2 << 20
)

// startLoad installs the daemon, connects to the bus (closed at the
// test's end), and measures the daemon just started and after a warm-up.
func startLoad(t *testing.T) (*testbed.Info, *dbus.Conn, usage, usage) {
	t.Helper()
	tb := install(t)
	conn, err := dbus.ConnectSystemBus()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	fresh := daemonUsage(t)
	warmUp(t)
	return tb, conn, fresh, settle(t, tb, conn, fresh, true)
}

func TestLoadLeavesNothingBehind(t *testing.T) {
	if *soak {
		t.Skip("-soak: the long variant runs instead")
	}
	tb, conn, fresh, before := startLoad(t)
	t.Logf("sandboxd just started: %v; after a warm-up of 3 cycles: %v", fresh, before)

	all := &round{lat: map[string]series{}}
	var after []usage
	for i := range 2 {
		r := run(context.Background(), shortN, shortCycles)
		u := settle(t, tb, conn, before, false)
		after = append(after, u)
		t.Logf("round %d: %d clients × %d cycles in %v, %d calls, %d failed; after: %v",
			i+1, r.n, r.cycles, r.elapsed.Round(time.Millisecond), r.calls, r.errors, u)
		if r.errors > 0 {
			t.Errorf("round %d: %d of %d calls failed, first: %s", i+1, r.errors, r.calls, strings.Join(r.firstErrs, "; "))
		}
		if want := r.n * (1 + r.cycles*len(ops)); r.calls != want {
			t.Errorf("round %d: %d calls made; want %d", i+1, r.calls, want)
		}
		for op, s := range r.lat {
			all.lat[op] = append(all.lat[op], s...)
		}
	}
	for _, op := range ops {
		t.Logf("%-7s p50 / p99: %s ms (%d calls over both rounds)", op, all.pcts(op), len(all.lat[op]))
	}
	if got := after[0].rss; got > before.rss+rssBound {
		t.Errorf("sandboxd's VmRSS after round 1: %s; before: %s (bound +%s)", mib(got), mib(before.rss), mib(rssBound))
	}
	if grew := int64(after[1].rss) - int64(after[0].rss); grew > rssGrowth {
		t.Errorf("sandboxd's VmRSS grew by %s between two identical rounds (%s, then %s; bound %s): a leak",
			mib(uint64(grew)), mib(after[0].rss), mib(after[1].rss), mib(rssGrowth))
	}
	if after[1].fds > after[0].fds {
		t.Errorf("sandboxd holds %d descriptors after round 2, %d after round 1:\n%s", after[1].fds, after[0].fds, fdList(after[1].pid))
	}
}

// Soak: where a round counts as held.
const (
	maxErrorRate = 0.01
	maxCreateP99 = 2 * time.Second
	// minAvailable is the memory the machine must have free before a
	// round starts (a live sandbox's init takes a few MiB).
	minAvailable = 4 << 30
)

func TestLoadSoak(t *testing.T) {
	if !*soak {
		t.Skip("the long load test runs with -soak (make soak)")
	}
	if *soakCycles < 1 || *soakMaxN < 1 {
		t.Fatal("-soak.cycles and -soak.max must be at least 1")
	}
	tb, conn, _, before := startLoad(t)
	begin := time.Now()

	var rounds []*round
	held, stop := 0, ""
	for n := 8; ; n *= 2 {
		if n > *soakMaxN {
			stop = fmt.Sprintf("N=%d is past -soak.max %d", n, *soakMaxN)
			break
		}
		// The next round makes twice the cycles of the last: at best the
		// same throughput, so it takes at least twice as long.
		if len(rounds) > 0 {
			last := rounds[len(rounds)-1]
			if time.Since(begin)+2*last.elapsed > *soakBudget {
				stop = fmt.Sprintf("N=%d would take about %v more, past -soak.budget %v", n, (2 * last.elapsed).Round(time.Second), *soakBudget)
				break
			}
		}
		if avail := memAvailable(t); avail < minAvailable {
			stop = fmt.Sprintf("N=%d: the machine has only %s available", n, mib(avail))
			break
		}
		ctx, cancel := context.WithTimeout(context.Background(), *soakBudget)
		r := run(ctx, n, *soakCycles)
		cancel()
		r.after = settle(t, tb, conn, before, false)
		rounds = append(rounds, r)
		t.Logf("N=%d: %d cycles in %v, %d of %d calls failed; after: %v", n, n**soakCycles, r.elapsed.Round(time.Millisecond), r.errors, r.calls, r.after)
		for _, e := range r.firstErrs {
			t.Logf("N=%d: %s", n, e)
		}
		if t.Failed() {
			stop = fmt.Sprintf("N=%d left something behind", n)
			break
		}
		p99 := r.lat[opCreate].percentile(0.99)
		if r.errorRate() > maxErrorRate || len(r.lat[opCreate]) == 0 || p99 > maxCreateP99 {
			stop = fmt.Sprintf("N=%d not held: %.1f%% of calls failed, create p99 %s ms", n, 100*r.errorRate(), ms(p99))
			break
		}
		held = n
	}

	var b strings.Builder
	fmt.Fprintf(&b, "sandboxd under load: N clients, each %d cycles of create, exec, diff, destroy (times in ms, p50 / p99 of the calls that succeeded; exec is the Exec call until its CommandExited)\n", *soakCycles)
	fmt.Fprintf(&b, "before: %v\n\n", before)
	b.WriteString("| N | cycles | errors | wall s | create | exec | diff | destroy | fds after | VmRSS after | threads after |\n")
	b.WriteString("|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, r := range rounds {
		fmt.Fprintf(&b, "| %d | %d | %d (%.2f%%) | %.1f | %s | %s | %s | %s | %d | %s | %d |\n",
			r.n, r.n*r.cycles, r.errors, 100*r.errorRate(), r.elapsed.Seconds(),
			r.pcts(opCreate), r.pcts(opExec), r.pcts(opDiff), r.pcts(opDestroy), r.after.fds, mib(r.after.rss), r.after.threads)
	}
	fmt.Fprintf(&b, "\nstopped: %s\n", stop)
	if held > 0 {
		fmt.Fprintf(&b, "largest N held (errors ≤ %.0f%%, create p99 ≤ %v): %d\n", 100*maxErrorRate, maxCreateP99, held)
	} else {
		b.WriteString("no N held\n")
	}
	t.Log("\n" + b.String())
	if held == 0 {
		t.Errorf("sandboxd did not hold even N=8")
	}
}

// memAvailable is MemAvailable of /proc/meminfo, in bytes.
func memAvailable(t *testing.T) uint64 {
	t.Helper()
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "MemAvailable:" {
			kb, _ := strconv.ParseUint(f[1], 10, 64)
			return kb << 10
		}
	}
	t.Fatal("no MemAvailable in /proc/meminfo")
	return 0
}
