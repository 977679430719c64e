package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/sandboxd/sandboxd/supervisor/api"
	sdconfig "github.com/sandboxd/sandboxd/supervisor/config"
	"github.com/sandboxd/sandboxd/tests/testbed"
)

// The daemon part measures what an agent sees: sandboxd installed as a
// service of the testbed's systemd, with its pool a directory of the
// testbed's btrfs, called over the system bus.

// Targets from the issue.
const (
	createTarget = 20 * time.Millisecond // CreateSandbox until ready, p50
	rssTarget    = 64 << 20              // the daemon's RSS with 200 live sandboxes
	rssLive      = 200                   // how many live sandboxes rssTarget is for
)

// daemonSizes are the project sizes of the daemon part: the target's size,
// and a small one to show that a create does not grow with the project.
var daemonSizes = []int{1000, targetSize}

const (
	daemonUnit = "sandboxd.service"
	unitPath   = "/run/systemd/system/" + daemonUnit
	policyPath = "/etc/dbus-1/system.d/org.sandboxd1.conf"
	// The configuration is the bench's own, named with --config, so that
	// an /etc/sandboxd/sandboxd.toml of a testbed left up is not touched.
	benchConfigDir = "/run/sandboxd-bench"
	// The state is on disk like the default /var/lib/sandboxd (the
	// testbed's overlay is on the machine's disk): bbolt syncs it twice
	// per create, and that is part of what a create costs.
	benchStateDir = "/var/lib/sandboxd-bench"
	// benchRootName is the daemon's pool: a directory of the testbed's
	// btrfs, beside the projects it snapshots.
	benchRootName = "bench-sandboxd"
	// daemonBinEnv names the daemon binary built outside the testbed.
	daemonBinEnv = "SANDBOXD_BENCH_DAEMON"
	// callTimeout bounds one call to the daemon, so that a daemon that
	// hangs fails the run instead of stalling it.
	callTimeout = time.Minute
)

// buildDaemon builds sandboxd from this repository into its bin/test and
// returns the binary's path.
func buildDaemon(ctx context.Context) (string, error) {
	cwd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("building sandboxd: %w", err)
	}
	root := moduleRoot(cwd)
	if root == "" {
		return "", fmt.Errorf("building sandboxd: no go.mod at or above %s: run the bench from the repository", cwd)
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		gobin = "/usr/local/go/bin/go" // sudo's PATH often lacks it; the Makefile looks there too
	}
	// Its own name, not the integration tests' bin/test/sandboxd: a test
	// run that rebuilds that one must not swap the binary under the
	// bench's running sandboxes.
	bin := filepath.Join(root, "bin", "test", "sandboxd-bench")
	progress("building %s", bin)
	cmd := exec.CommandContext(ctx, gobin, "build", "-o", bin, "./cmd/sandboxd")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building sandboxd: %w\n%s", err, out)
	}
	return bin, nil
}

// daemon is sandboxd as the bench installed it, and what the bench must
// undo: each field is set as soon as its step has begun, so that stop
// undoes exactly what a failed start did.
type daemon struct {
	bin, repo  string
	conn       *dbus.Conn
	wroteConf  bool
	wrotePol   bool
	wroteUnit  bool
	started    bool
	configPath string
	live       map[string]bool // sandboxes made and not yet destroyed
	// CommandExited signals, and the statuses they told by command id.
	signals chan *dbus.Signal
	exited  map[string]int32
}

// benchDaemon makes projects of daemonSizes files, installs and starts
// sandboxd, and times creates and destroys at each size, beside `cp -a`
// of the project, and adds the daemon's memory (the daemon part, to t);
// then it times diffs and promotions (the promotion part, to pr).
// Everything goes at the end, also after an error. It returns what ran,
// for the report.
func benchDaemon(ctx context.Context, cfg config, t, pr *table) (version string, err error) {
	cleanup := context.WithoutCancel(ctx)
	bin := os.Getenv(daemonBinEnv)
	if bin == "" { // started inside a testbed: nobody built it
		if bin, err = buildDaemon(ctx); err != nil {
			return "", err
		}
	}
	cwd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("finding the repository: %w", err)
	}
	fs := &btrfsFS{mount: testbed.BtrfsMount, root: filepath.Join(testbed.BtrfsMount, benchRootName)}
	d := &daemon{bin: bin, repo: moduleRoot(cwd), live: map[string]bool{}}
	if err := clearLeftovers(ctx, fs); err != nil {
		return "", err
	}

	// The projects, before the daemon, which checks them at start.
	projects := map[string]string{} // name -> path
	dirs := map[int]string{}
	defer func() {
		for _, path := range projects {
			err = errors.Join(err, fs.dropProject(cleanup, path))
		}
	}()
	for _, n := range daemonSizes {
		path, dir, err := fs.newProject(ctx, projectPath(n))
		if err != nil {
			return "", err
		}
		projects[projectName(n)] = path
		dirs[n] = dir
		if err := generate(ctx, "daemon "+count(n), dir, n); err != nil {
			return "", err
		}
	}
	if err := fs.settle(ctx); err != nil {
		return "", err
	}

	// The daemon's pool goes last: after the daemon has stopped, whatever
	// a failed destroy left of its sandboxes is deleted with it.
	defer func() {
		err = errors.Join(err, d.stop(cleanup), fs.close(cleanup))
	}()
	if err := d.start(ctx, fs.root, projects); err != nil {
		return "", err
	}
	systemd, err := tool(ctx, "systemctl", "--version")
	if err != nil {
		return "", err
	}
	if f := strings.Fields(firstLine(systemd)); len(f) >= 2 {
		systemd = f[0] + " " + f[1] // "systemd 252"
	}
	version = fmt.Sprintf("sandboxd (built from this tree, a service of the testbed's %s, its pool a directory of the testbed's btrfs)", systemd)

	if cfg.daemon {
		if err := benchDaemonSizes(ctx, cfg, d, t, fs, dirs); err != nil {
			return version, err
		}
	}
	// Last: promotions change the projects.
	if cfg.promote {
		if err := benchPromotions(ctx, cfg, d, fs, pr, dirs); err != nil {
			return version, fmt.Errorf("promotions: %w", err)
		}
	}
	return version, nil
}

// benchDaemonSizes is the daemon part: creates, destroys, commands and
// memory, at each of daemonSizes (projects at dirs).
func benchDaemonSizes(ctx context.Context, cfg config, d *daemon, t *table, fs *btrfsFS, dirs map[int]string) error {
	pid, idle, err := d.memory(ctx)
	if err != nil {
		return err
	}
	var mem []row // memory rows, after the timings
	mem = append(mem, row{fs: "btrfs", op: fmt.Sprintf("sandboxd's VmRSS, no sandboxes (just started): %s, %d threads", mib(idle.rss), idle.threads)})

	var ref *sizeResult
	for _, n := range daemonSizes {
		res, rows, err := benchDaemonSize(ctx, cfg, d, t, fs, n, dirs[n], ref, pid, idle)
		mem = append(mem, rows...)
		if err != nil {
			return err
		}
		if ref == nil {
			ref = res
		}
	}
	_, after, err := d.memory(ctx)
	if err != nil {
		return err
	}
	mem = append(mem, row{fs: "btrfs",
		op:      fmt.Sprintf("sandboxd's VmRSS, no sandboxes again (after %d creates and destroys): %s, %d threads", len(daemonSizes)*(cfg.creates+1), mib(after.rss), after.threads),
		verdict: fmt.Sprintf("no target; %s over just started", plusMiB(after.rss, idle.rss))})
	for _, r := range mem {
		t.add(r)
	}
	return nil
}

// projectName is the daemon's name of the project of n files.
func projectName(n int) string { return "bench-" + count(n) }

// projectPath is where the project of n files is, under the btrfs mount.
func projectPath(n int) string { return fmt.Sprintf("bench-daemon-p%d", n) }

// clearLeftovers removes what a run killed inside a testbed that stayed
// up has left: its daemon, still running with its sandboxes (their scopes
// outlive it), its pool, its projects and the copies rsync wrote to. Its
// unit file, which names the bench's configuration, tells it from a
// sandboxd installed by others, which start refuses to replace.
func clearLeftovers(ctx context.Context, fs *btrfsFS) error {
	unit, err := os.ReadFile(unitPath)
	if err == nil && bytes.Contains(unit, []byte(benchConfigDir)) {
		progress("daemon: removing the daemon and the sandboxes of an earlier run")
		conn, err := dbus.ConnectSystemBus()
		if err != nil {
			return fmt.Errorf("connecting to the system bus: %w", err)
		}
		// Started if it is not running, so that it destroys its own
		// sandboxes from its records; stop undoes all of it. The policy
		// stays, as it was there before this run.
		old := &daemon{conn: conn, wroteConf: true, wroteUnit: true, started: true, live: map[string]bool{}}
		_, serr := tool(ctx, "systemctl", "start", daemonUnit)
		if err := errors.Join(serr, old.stop(ctx)); err != nil {
			return fmt.Errorf("removing what an earlier run left: %w", err)
		}
	}
	errs := []error{fs.close(ctx)}
	for _, n := range daemonSizes {
		errs = append(errs, deleteSubvolume(filepath.Join(fs.mount, projectPath(n))))
	}
	for _, c := range []string{rsyncCopyA, rsyncCopyB} {
		errs = append(errs, deleteSubvolume(filepath.Join(fs.mount, c)))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("removing what an earlier run left: %w", err)
	}
	return nil
}

// benchDaemonSize times cfg.creates CreateSandbox calls of the project of n
// files, one after the other, then measures memory with them all live,
// then times DestroySandbox of each; then `cp -a` of the project. It adds
// the timing rows to t and returns the memory rows. pid is the daemon's,
// and idle its memory with no sandboxes.
func benchDaemonSize(ctx context.Context, cfg config, d *daemon, t *table, fs *btrfsFS, n int, dir string,
	ref *sizeResult, pid int, idle memInfo) (res *sizeResult, mem []row, err error) {
	label := "daemon " + count(n)
	project := projectName(n)
	begin := time.Now()
	// One untimed create and destroy: the first of a project pays for
	// cold caches of its subvolume.
	id, err := d.create(ctx, project)
	if err != nil {
		return nil, nil, fmt.Errorf("%s (warm-up): %w", label, err)
	}
	if err := d.destroy(ctx, id); err != nil {
		return nil, nil, fmt.Errorf("%s (warm-up): %w", label, err)
	}
	var creates, destroys series
	var ids []string
	for range cfg.creates {
		var id string
		dt, err := timed(func() (err error) {
			id, err = d.create(ctx, project)
			return err
		})
		if err != nil {
			return nil, nil, fmt.Errorf("%s (create %d): %w", label, len(ids)+1, err)
		}
		creates, ids = append(creates, dt), append(ids, id)
	}
	progress("%s: warm-up and %d creates in %v", label, len(ids), time.Since(begin).Round(time.Millisecond))

	// Memory while they all live.
	now, m, err := d.memory(ctx)
	if err != nil {
		return nil, nil, err
	}
	if now != pid {
		return nil, nil, fmt.Errorf("%s: sandboxd restarted during the creates (pid %d, was %d): see journalctl -u %s", label, now, pid, daemonUnit)
	}
	r := row{fs: "btrfs", files: n,
		op: fmt.Sprintf("sandboxd's VmRSS, %d live sandboxes: %s, %d threads", len(ids), mib(m.rss), m.threads)}
	r.verdict = fmt.Sprintf("%s over no sandboxes, %s a sandbox", plusMiB(m.rss, idle.rss), kib((int64(m.rss)-int64(idle.rss))/int64(len(ids))))
	if len(ids) == rssLive {
		r.target = fmt.Sprintf("< %d MiB with %d live", rssTarget>>20, rssLive)
		r.verdict = fmt.Sprintf("%s: %s; %s", mib(m.rss), metOrMissed(m.rss < rssTarget), r.verdict)
	}
	mem = append(mem, r)
	if n == daemonSizes[len(daemonSizes)-1] {
		ir, err := d.initMemory(ctx, ids)
		if err != nil {
			return nil, mem, err
		}
		ir.files = n
		mem = append(mem, ir)
	}

	begin = time.Now()
	for _, id := range ids {
		dt, err := timed(func() error { return d.destroy(ctx, id) })
		if err != nil {
			return nil, mem, fmt.Errorf("%s (destroy %d): %w", label, len(destroys)+1, err)
		}
		destroys = append(destroys, dt)
	}
	progress("%s: %d destroys in %v", label, len(destroys), time.Since(begin).Round(time.Millisecond))

	res = &sizeResult{files: n, snapshot: creates.median(), dele: destroys.median()}
	// A create gets slower as sandboxes pile up (each is two more btrfs
	// subvolumes, and a snapshot's commit grows with them): the medians
	// of the first and last tenth of the calls show by how much.
	k := max(1, len(creates)/10)
	cr := row{fs: "btrfs", files: n, s: creates,
		op: fmt.Sprintf("`CreateSandbox` over the system bus, until ready; calls 1-%d: %s ms, %d-%d: %s ms; max %s ms",
			k, ms(creates[:k].median()), len(creates)-k+1, len(creates), ms(creates[len(creates)-k:].median()), ms(creates.max())),
		target: fmt.Sprintf("p50 < %d ms; flat", createTarget/time.Millisecond)}
	dr := row{fs: "btrfs", files: n, s: destroys,
		op: fmt.Sprintf("`DestroySandbox` of each; max %s ms", ms(destroys.max()))}
	verdicts := []string{"reference size"}
	if ref != nil {
		verdicts = []string{flatness(res.snapshot, ref.snapshot, n, ref.files)}
		dr.verdict = fmt.Sprintf("no target; %s of %s", ratio(res.dele, ref.dele), count(ref.files))
	}
	verdicts = append(verdicts, fmt.Sprintf("%s ms: %s", ms(res.snapshot), metOrMissed(res.snapshot < createTarget)))
	cr.verdict = strings.Join(verdicts, "; ")
	t.add(cr)
	t.add(dr)

	// Commands, and the copy a naive sandbox would make, on the same
	// filesystem; the destroyed snapshots are cleaned first, untimed.
	if err := fs.settle(ctx); err != nil {
		return nil, mem, err
	}
	live, err := d.create(ctx, project)
	if err != nil {
		return nil, mem, err
	}
	if err := benchRuntime(ctx, cfg, d, t, project, n, live); err != nil {
		return nil, mem, err
	}
	if err := d.destroy(ctx, live); err != nil {
		return nil, mem, err
	}
	if err := fs.settle(ctx); err != nil {
		return nil, mem, err
	}
	cp, err := benchCopy(ctx, cfg, &pool{name: "btrfs", fs: fs}, label, dir, n, false)
	if err != nil {
		return nil, mem, err
	}
	cp.fs, cp.files, cp.op = "btrfs", n, "`cp -a` of the project"
	cp.ratio = ratio(cp.s.median(), res.snapshot)
	t.add(cp)
	return res, mem, nil
}

// start installs sandboxd as an operator would (the bus policy, the unit
// with ExecStart at the built binary, a configuration naming the
// projects), starts it, and connects to the system bus.
func (d *daemon) start(ctx context.Context, root string, projects map[string]string) error {
	if d.repo == "" {
		return errors.New("installing sandboxd: not run from the repository (no go.mod above the working directory)")
	}
	if out, _ := command(ctx, "systemctl", "is-active", daemonUnit).Output(); strings.TrimSpace(string(out)) == "active" {
		return fmt.Errorf("installing sandboxd: %s already runs in this testbed; stop it first (systemctl stop %s)", daemonUnit, daemonUnit)
	}
	conn, err := dbus.ConnectSystemBus()
	if err != nil {
		return fmt.Errorf("connecting to the system bus: %w", err)
	}
	d.conn = conn

	d.configPath = filepath.Join(benchConfigDir, "sandboxd.toml")
	text, err := daemonConfig(d.configPath, root, projects)
	if err != nil {
		return err
	}
	d.wroteConf = true
	if err := os.MkdirAll(benchConfigDir, 0o755); err != nil {
		return fmt.Errorf("writing sandboxd's configuration: %w", err)
	}
	if err := os.WriteFile(d.configPath, text, 0o644); err != nil {
		return fmt.Errorf("writing sandboxd's configuration: %w", err)
	}

	// The policy lets root own the name. One already there (a testbed
	// left up after the integration tests) is the same file and stays.
	if _, err := os.Stat(policyPath); errors.Is(err, os.ErrNotExist) {
		policy, err := os.ReadFile(filepath.Join(d.repo, "packaging", "dbus", "org.sandboxd1.conf"))
		if err != nil {
			return fmt.Errorf("installing the bus policy: %w", err)
		}
		d.wrotePol = true
		if err := os.WriteFile(policyPath, policy, 0o644); err != nil {
			return fmt.Errorf("installing the bus policy: %w", err)
		}
		if err := d.reloadBus(ctx); err != nil {
			return err
		}
	}

	unit, err := os.ReadFile(filepath.Join(d.repo, "packaging", "systemd", daemonUnit))
	if err != nil {
		return fmt.Errorf("installing %s: %w", daemonUnit, err)
	}
	const stock = "ExecStart=/usr/bin/sandboxd"
	if !bytes.Contains(unit, []byte(stock)) {
		return fmt.Errorf("installing %s: the packaged unit has no %q line to point at the built binary", daemonUnit, stock)
	}
	unit = bytes.ReplaceAll(unit, []byte(stock), fmt.Appendf(nil, "ExecStart=%s --config %s", d.bin, d.configPath))
	d.wroteUnit = true
	if err := os.WriteFile(unitPath, unit, 0o644); err != nil {
		return fmt.Errorf("installing %s: %w", daemonUnit, err)
	}
	if _, err := tool(ctx, "systemctl", "daemon-reload"); err != nil {
		return fmt.Errorf("installing %s: %w", daemonUnit, err)
	}
	d.started = true
	// Type=notify: this returns once the daemon has said READY=1, after
	// its reconcile and with its name on the bus.
	progress("daemon: starting %s", daemonUnit)
	if _, err := tool(ctx, "systemctl", "start", daemonUnit); err != nil {
		return fmt.Errorf("starting sandboxd: %w; its journal: %s", err, d.journal(ctx))
	}

	// A run killed inside a testbed that stayed up leaves sandboxes in
	// the state directory; the daemon has adopted them. They go, and the
	// daemon restarts, so that its memory is measured from none.
	left, err := d.list(ctx)
	if err != nil {
		return err
	}
	if len(left) > 0 {
		progress("daemon: destroying %d sandboxes left by an earlier run", len(left))
		for _, id := range left {
			if err := d.destroy(ctx, id); err != nil {
				return err
			}
		}
		if _, err := tool(ctx, "systemctl", "restart", daemonUnit); err != nil {
			return fmt.Errorf("restarting sandboxd: %w; its journal: %s", err, d.journal(ctx))
		}
	}
	return nil
}

// daemonConfig is the daemon's configuration: its pool at root on btrfs,
// its own state directory, and the projects.
func daemonConfig(path, root string, projects map[string]string) ([]byte, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "[daemon]\nstate_dir = %q\n\n[storage]\nbackend = \"btrfs\"\n\n[storage.btrfs]\nroot = %q\n", benchStateDir, root)
	var tail strings.Builder
	for name, dir := range projects {
		fmt.Fprintf(&tail, "\n[[project]]\nname = %q\npath = %q\n", name, dir)
	}
	// The caps of [limits], where the daemon has them, would refuse the
	// bench's 200 sandboxes of one user (32 by default): they are lifted.
	// A configuration that knows no [limits] has no caps, and must not
	// name the section.
	lifted := b.String() + "\n[limits]\nmax_sandboxes = 0\nmax_sandboxes_per_user = 0\n" + tail.String()
	if _, err := sdconfig.Parse([]byte(lifted), path); err == nil {
		return []byte(lifted), nil
	}
	plain := b.String() + tail.String()
	if _, err := sdconfig.Parse([]byte(plain), path); err != nil {
		return nil, fmt.Errorf("writing sandboxd's configuration: %w", err)
	}
	return []byte(plain), nil
}

// reloadBus makes dbus-daemon read its policy files again.
func (d *daemon) reloadBus(ctx context.Context) error {
	if err := d.conn.BusObject().CallWithContext(ctx, "org.freedesktop.DBus.ReloadConfig", 0).Err; err != nil {
		return fmt.Errorf("reloading the bus's policy: %w", err)
	}
	return nil
}

// journal is the end of the daemon's journal, for an error message.
func (d *daemon) journal(ctx context.Context) string {
	out, _ := command(ctx, "journalctl", "--no-pager", "-o", "cat", "-n", "15", "-u", daemonUnit).CombinedOutput()
	return strings.TrimSpace(string(out))
}

func (d *daemon) manager() dbus.BusObject { return d.conn.Object(api.BusName, api.ManagerPath) }

// create makes a sandbox of project; the reply comes once it is ready.
func (d *daemon) create(ctx context.Context, project string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	var id string
	var object dbus.ObjectPath
	err := d.manager().CallWithContext(ctx, api.ManagerInterface+".CreateSandbox", 0, project, map[string]dbus.Variant{}).Store(&id, &object)
	if err != nil {
		return "", fmt.Errorf("creating a sandbox of %s: %w", project, err)
	}
	d.live[id] = true
	return id, nil
}

func (d *daemon) destroy(ctx context.Context, id string) error {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	if err := d.manager().CallWithContext(ctx, api.ManagerInterface+".DestroySandbox", 0, id).Err; err != nil {
		return fmt.Errorf("destroying sandbox %s: %w", id, err)
	}
	delete(d.live, id)
	return nil
}

// list returns the ids of every sandbox the daemon has.
func (d *daemon) list(ctx context.Context) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	var entries []api.ListEntry
	if err := d.manager().CallWithContext(ctx, api.ManagerInterface+".ListSandboxes", 0).Store(&entries); err != nil {
		return nil, fmt.Errorf("listing sandboxes: %w", err)
	}
	ids := make([]string, len(entries))
	for i, e := range entries {
		ids[i] = e.ID
	}
	return ids, nil
}

// stop undoes start: it destroys every sandbox, stops the daemon, and
// removes what was installed. It carries on past errors, and what a
// failed destroy left is stopped here (its scope) or by the caller (its
// volumes, with the pool).
func (d *daemon) stop(ctx context.Context) error {
	var errs []error
	if d.started {
		if ids, err := d.list(ctx); err != nil {
			errs = append(errs, err)
		} else {
			for _, id := range ids {
				if err := d.destroy(ctx, id); err != nil {
					errs = append(errs, err)
				}
			}
		}
		if _, err := tool(ctx, "systemctl", "stop", daemonUnit); err != nil {
			errs = append(errs, fmt.Errorf("stopping sandboxd: %w", err))
		}
		_, _ = tool(ctx, "systemctl", "reset-failed", daemonUnit)
		// Scopes outlive the daemon (KillMode=mixed): those of sandboxes
		// it did not destroy must be stopped here.
		for id := range d.live {
			unit := "sandbox-" + id + ".scope"
			if out, _ := command(ctx, "systemctl", "is-active", unit).Output(); strings.TrimSpace(string(out)) == "active" {
				if _, err := tool(ctx, "systemctl", "stop", unit); err != nil {
					errs = append(errs, fmt.Errorf("stopping the scope of an undestroyed sandbox: %w", err))
				}
			}
		}
	}
	if d.wroteUnit {
		if err := os.Remove(unitPath); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("removing %s: %w", unitPath, err))
		}
		if _, err := tool(ctx, "systemctl", "daemon-reload"); err != nil {
			errs = append(errs, fmt.Errorf("removing %s: %w", daemonUnit, err))
		}
	}
	if d.wrotePol {
		if err := os.Remove(policyPath); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("removing the bus policy: %w", err))
		} else if err := d.reloadBus(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if d.wroteConf {
		if err := os.RemoveAll(benchConfigDir); err != nil {
			errs = append(errs, fmt.Errorf("removing sandboxd's configuration: %w", err))
		}
	}
	if d.started {
		if err := os.RemoveAll(benchStateDir); err != nil {
			errs = append(errs, fmt.Errorf("removing sandboxd's state: %w", err))
		}
	}
	if d.conn != nil {
		d.conn.Close()
	}
	return errors.Join(errs...)
}

// memInfo is a process's memory, in bytes.
type memInfo struct {
	rss  uint64 // VmRSS: resident pages, shared ones counted in full
	anon uint64 // RssAnon: the resident pages that are its own
	pss  uint64 // Pss: resident pages, each shared one divided among its sharers
	// threads are its OS threads: each has a stack, and a Go program
	// keeps one blocked in every wait for a child.
	threads int
}

// memory returns the daemon's pid and its memory now.
func (d *daemon) memory(ctx context.Context) (int, memInfo, error) {
	out, err := tool(ctx, "systemctl", "show", "-P", "MainPID", daemonUnit)
	if err != nil {
		return 0, memInfo{}, fmt.Errorf("finding sandboxd's pid: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil || pid == 0 {
		return 0, memInfo{}, fmt.Errorf("finding sandboxd's pid: MainPID is %q", strings.TrimSpace(out))
	}
	m, err := readMemory(pid)
	return pid, m, err
}

// initMemory is the row of the sandboxes' init processes: one sandbox's
// (the last made), and the sum over all of ids, each found in its scope
// by asking systemd. The init is what a sandbox costs in memory while
// nothing runs in it.
func (d *daemon) initMemory(ctx context.Context, ids []string) (row, error) {
	var one, all memInfo
	systemd := d.conn.Object("org.freedesktop.systemd1", "/org/freedesktop/systemd1")
	for _, id := range ids {
		var unit string
		if err := d.conn.Object(api.BusName, api.SandboxPath(id)).StoreProperty(api.SandboxInterface+".Unit", &unit); err != nil {
			return row{}, fmt.Errorf("finding the scope of sandbox %s: %w", id, err)
		}
		var procs []struct {
			Cgroup  string
			PID     uint32
			Cmdline string
		}
		if err := systemd.CallWithContext(ctx, "org.freedesktop.systemd1.Manager.GetUnitProcesses", 0, unit).Store(&procs); err != nil {
			return row{}, fmt.Errorf("listing the processes of %s: %w", unit, err)
		}
		pid := 0
		for _, p := range procs {
			if strings.HasSuffix(p.Cmdline, " sandbox-init") {
				pid = int(p.PID)
			}
		}
		if pid == 0 {
			return row{}, fmt.Errorf("finding the init of sandbox %s: %s holds no sandbox-init (%v)", id, unit, procs)
		}
		m, err := readMemory(pid)
		if err != nil {
			return row{}, err
		}
		one = m
		all.rss += m.rss
		all.pss += m.pss
	}
	return row{fs: "btrfs",
		op: fmt.Sprintf("one sandbox's `sandboxd sandbox-init` (the process that holds its scope): VmRSS %s, of which %s its own (RssAnon); Pss %s",
			mib(one.rss), mib(one.anon), mib(one.pss)),
		verdict: fmt.Sprintf("no target; all %d inits: %s Pss", len(ids), mib(all.pss)),
	}, nil
}

// readMemory reads a process's memory from /proc: VmRSS, RssAnon and
// Threads from status, Pss from smaps_rollup.
func readMemory(pid int) (memInfo, error) {
	var m memInfo
	fields := map[string]*uint64{"VmRSS:": &m.rss, "RssAnon:": &m.anon, "Pss:": &m.pss}
	for _, name := range []string{"status", "smaps_rollup"} {
		path := fmt.Sprintf("/proc/%d/%s", pid, name)
		data, err := os.ReadFile(path)
		if err != nil {
			return m, fmt.Errorf("reading the memory of pid %d: %w", pid, err)
		}
		sc := bufio.NewScanner(bytes.NewReader(data))
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) == 2 && f[0] == "Threads:" {
				m.threads, _ = strconv.Atoi(f[1])
			}
			if len(f) == 3 && f[2] == "kB" && fields[f[0]] != nil {
				kb, err := strconv.ParseUint(f[1], 10, 64)
				if err != nil {
					return m, fmt.Errorf("reading %s: %q: %w", path, sc.Text(), err)
				}
				*fields[f[0]] = kb << 10
			}
		}
	}
	if m.rss == 0 || m.pss == 0 {
		return m, fmt.Errorf("reading the memory of pid %d: no VmRSS or Pss", pid)
	}
	return m, nil
}

func mib(b uint64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

func kib(b int64) string { return fmt.Sprintf("%d KiB", b>>10) }

// plusMiB is the growth from b to a: "+9.1 MiB", "-0.4 MiB".
func plusMiB(a, b uint64) string {
	return fmt.Sprintf("%+.1f MiB", (float64(a)-float64(b))/(1<<20))
}
