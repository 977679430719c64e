package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/godbus/dbus/v5"

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
	// And sandboxctl beside it (ctlBin), which the scale part times, and
	// the smallest Go program (sleeperBin), whose memory it reads.
	for _, b := range [][2]string{{bin, "./cmd/sandboxd"}, {ctlBin(bin), "./cmd/sandboxctl"}, {sleeperBin(bin), "./tests/bench/gosleep"}} {
		cmd := exec.CommandContext(ctx, gobin, "build", "-o", b[0], b[1])
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("building %s: %w\n%s", b[1], err, out)
		}
	}
	return bin, nil
}

// ctlBin is the sandboxctl built beside the daemon binary bin, and
// sleeperBin tests/bench/gosleep.
func ctlBin(bin string) string { return filepath.Join(filepath.Dir(bin), "sandboxctl-bench") }

func sleeperBin(bin string) string { return filepath.Join(filepath.Dir(bin), "gosleep-bench") }

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
	// root and projects are what its configuration names; userns says
	// whether it gives sandboxes user namespaces (see sandboxTable).
	root     string
	projects map[string]string
	userns   bool
	// pool is its [limits] pool, the warm pool's size (0: off, the
	// daemon's default; the pool part sets it).
	pool int
	live map[string]bool // sandboxes made and not yet destroyed
	// CommandExited signals, and the statuses they told by command id.
	signals chan *dbus.Signal
	exited  map[string]int32
}

// benchDaemon makes projects of daemonSizes files, installs and starts
// sandboxd, and times creates and destroys at each size, beside `cp -a`
// of the project, and adds the daemon's memory (the daemon part, to t);
// then it times diffs and promotions (the promotion part, to pr).
// Everything goes at the end, also after an error. It returns what ran,
// for the report. The fork part's rows go to fk, the warm pool's to wp.
func benchDaemon(ctx context.Context, cfg config, t, pr, sc, fk, wp *table) (version string, err error) {
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
		without, err := benchDaemonSizes(ctx, cfg, d, t, fs, dirs)
		if err != nil {
			return version, err
		}
		if err := benchProcesses(ctx, d, t, fs, daemonSizes[0]); err != nil {
			return version, fmt.Errorf("processes and ports: %w", err)
		}
		if err := benchFiles(ctx, d, t, fs, daemonSizes[0]); err != nil {
			return version, fmt.Errorf("the file API: %w", err)
		}
		if err := benchUserNS(ctx, cfg, d, t, fs, without); err != nil {
			return version, fmt.Errorf("user namespaces: %w", err)
		}
	}
	if cfg.daemon || cfg.ports {
		if err := benchPortConns(ctx, d, t, daemonSizes[0]); err != nil {
			return version, fmt.Errorf("held connections to exposed ports: %w", err)
		}
	}
	if cfg.fork {
		if err := benchForks(ctx, cfg, d, fk, fs); err != nil {
			return version, fmt.Errorf("forks: %w", err)
		}
	}
	if cfg.scale {
		res, err := benchScale(ctx, cfg, d, sc, fs, targetSize)
		sc.note = scaleNote(res)
		if err != nil {
			return version, fmt.Errorf("scale: %w", err)
		}
	}
	if cfg.warm {
		res, err := benchWarm(ctx, cfg, d, fs)
		addWarmRows(wp, res)
		wp.note = warmNote(res)
		if err != nil {
			return version, fmt.Errorf("pool: %w", err)
		}
	}
	// Last: promotions change the projects. They run as before, without
	// user namespaces.
	if cfg.promote {
		if d.userns {
			if err := d.reconfigure(ctx, false); err != nil {
				return version, err
			}
		}
		if err := benchPromotions(ctx, cfg, d, fs, pr, dirs); err != nil {
			return version, fmt.Errorf("promotions: %w", err)
		}
	}
	return version, nil
}

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
