// Command bench measures what sandboxes cost on real copy-on-write
// filesystems, so docs/numbers.md can show it and the targets can be
// checked by eye: cowfs snapshots (a writable snapshot of a read-only base,
// which is what making a sandbox costs) and deletes of projects of 1k, 10k
// and 100k small files, on btrfs and on ZFS, beside `cp -a` and
// `cp -a --reflink=always` of the same trees; and cowfs Changes of 10
// changes in the largest project beside `rsync -an --delete
// --itemize-changes` over the same two trees.
//
// Its daemon part measures sandboxd itself, as a systemd service called
// over the system bus: CreateSandbox until ready and DestroySandbox, 200 of
// each, for projects of 1k and 100k files beside `cp -a` of them, and the
// daemon's memory with 200 live sandboxes; then, restarted with sandboxes in
// user namespaces, its creates and commands again, beside those without.
//
// Its promotion part, through the same daemon, times the change list
// (Diff) and a promotion until done of 10, 100 and 1,000 changed files in
// a sandbox of the 100k-file project, and of 10 in the 1k one, beside
// `rsync -a` of the same change from the sandbox's tree to a copy of the
// project.
//
// Its pool part times creates that claim a ready sandbox of a warm pool
// beside full creates with the pool off, with one client and with eight,
// at a few and at -live live sandboxes, the pool's refill, and the CPU of
// a claim and of a full create, beside a call that does nothing.
//
// It prints markdown tables on standard output and its progress on
// standard error. Timings and sizes are reported, never asserted.
//
// Run it as root from the module root:
//
//	go run ./tests/bench [-parts cowfs,daemon,promote] [-sizes 1000,10000,100000] [-backends btrfs,zfs]
//
// Outside a testbed it boots one around itself (package testbed); inside
// one (`bin/testbed run -- go run ./tests/bench`) it runs directly.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/tests/testbed"
)

// config is what the flags choose.
type config struct {
	cowfs, daemon, promote bool // the parts that run
	scale                  bool // the daemon with cfg.live sandboxes
	ports                  bool // the daemon holding connections to exposed ports (also in daemon)
	fork                   bool // forks of a sandbox beside creates and reflink copies
	warm                   bool // part pool: claims from a warm pool beside full creates
	poolSize               int  // part pool: the pool's size ([limits] pool)
	sizes                  []int
	backends               []string
	reps                   int           // runs of snapshot, delete and change listing
	copyReps               int           // runs of each cp of a big tree (bigTree files or more)
	budget                 time.Duration // a series stops early after this long (at least minReps runs)
	creates                int           // sandboxes the daemon part makes in a row, per project size
	promoteReps            int           // promotions of each change size
	changes                []int         // changed files the promotion part promotes
	live                   int           // scale part: live sandboxes
}

// usesDaemon says whether a part that runs needs sandboxd installed.
func (c config) usesDaemon() bool {
	return c.daemon || c.promote || c.scale || c.ports || c.fork || c.warm
}

// minReps is the fewest timed runs a series makes, whatever the budget.
const minReps = 3

func main() {
	cfg, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		os.Exit(2)
	}
	if !testbed.Inside() {
		if cfg.usesDaemon() {
			// Built here, before the wait for the testbed's lock, with
			// the user's Go environment; the repository is seen at the
			// same path inside.
			bin, err := buildDaemon(context.Background())
			if err != nil {
				fmt.Fprintf(os.Stderr, "bench: %v\n", err)
				os.Exit(2)
			}
			if err := os.Setenv(daemonBinEnv, bin); err != nil {
				fmt.Fprintf(os.Stderr, "bench: %v\n", err)
				os.Exit(2)
			}
		}
		os.Exit(runInTestbed())
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer cancel()
	if err := run(ctx, cfg); err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		os.Exit(1)
	}
}

func parseFlags(args []string) (config, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	parts := fs.String("parts", "cowfs,daemon,fork,pool,promote,scale", "what to measure, comma-separated: cowfs (snapshots on each backend), daemon (sandboxd over the bus), fork (forks of a sandbox beside creates), pool (claims from a warm pool beside full creates, up to -live), promote (its diff and promotion), scale (-live sandboxes at once), ports (the daemon's rows of held connections alone; daemon has them too)")
	sizes := fs.String("sizes", "1000,10000,100000", "project sizes, in files, comma-separated")
	backends := fs.String("backends", "btrfs,zfs", "filesystems to measure, comma-separated: btrfs, zfs")
	reps := fs.Int("reps", 15, "timed runs of snapshot, delete and change listing")
	copyReps := fs.Int("copy-reps", 3, "timed runs of each cp of 10k files or more (smaller trees get -reps)")
	budget := fs.Duration("budget", 40*time.Second, "a series of runs stops early once it has taken this long (after at least 3 runs)")
	creates := fs.Int("creates", 200, "daemon part: sandboxes made in a row, and then destroyed, per project size")
	live := fs.Int("live", 1000, "scale and pool parts: sandboxes kept live at once")
	poolSize := fs.Int("pool", 200, "pool part: the warm pool's size ([limits] pool; the issue's 200)")
	promoteReps := fs.Int("promote-reps", 5, "promote part: promotions of each change size, each from a new sandbox")
	changes := fs.String("changes", "10,100,1000", "promote part: changed files to promote in the 100k-file project, comma-separated; the 1k one gets the fewest")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	cfg := config{reps: *reps, copyReps: *copyReps, budget: *budget, creates: *creates, promoteReps: *promoteReps, live: *live, poolSize: *poolSize}
	for _, p := range strings.Split(*parts, ",") {
		switch strings.TrimSpace(p) {
		case "cowfs":
			cfg.cowfs = true
		case "daemon":
			cfg.daemon = true
		case "promote":
			cfg.promote = true
		case "scale":
			cfg.scale = true
		case "ports":
			cfg.ports = true
		case "fork":
			cfg.fork = true
		case "pool":
			cfg.warm = true
		default:
			return cfg, fmt.Errorf("-parts: unknown part %q (cowfs, daemon, fork, pool, promote, scale, ports)", p)
		}
	}
	for _, s := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 100 {
			return cfg, fmt.Errorf("-sizes: %q is not a number of files (at least 100)", s)
		}
		cfg.sizes = append(cfg.sizes, n)
	}
	for _, b := range strings.Split(*backends, ",") {
		b = strings.TrimSpace(b)
		if b != "btrfs" && b != "zfs" {
			return cfg, fmt.Errorf("-backends: unknown backend %q (btrfs, zfs)", b)
		}
		cfg.backends = append(cfg.backends, b)
	}
	if cfg.live < 2 {
		return cfg, fmt.Errorf("-live must be at least 2")
	}
	if cfg.poolSize < 2 {
		return cfg, fmt.Errorf("-pool must be at least 2")
	}
	if cfg.reps < minReps || cfg.copyReps < 1 || cfg.creates < minReps || cfg.promoteReps < minReps {
		return cfg, fmt.Errorf("-reps, -creates and -promote-reps must be at least %d and -copy-reps at least 1", minReps)
	}
	for _, s := range strings.Split(*changes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 10 || n > targetSize/100 {
			return cfg, fmt.Errorf("-changes: %q is not a number of files from 10 to %d", s, targetSize/100)
		}
		cfg.changes = append(cfg.changes, n)
	}
	// Each run (and each warm-up) changes files no other run changed, the
	// k-th of them among the files from k*(project/changes) on: the
	// project must have enough there for every run of every size.
	runs := (cfg.promoteReps + 1) * len(cfg.changes)
	if most, fewest := slices.Max(cfg.changes), slices.Min(cfg.changes); runs > targetSize/most || cfg.promoteReps+1 > daemonSizes[0]/fewest {
		return cfg, fmt.Errorf("-changes %s with -promote-reps %d: the projects have too few files for every run to change files of its own", *changes, cfg.promoteReps)
	}
	return cfg, nil
}

// runInTestbed runs this same binary, with the same arguments, inside a
// throw-away testbed. The binary's directory (under /tmp for `go run`,
// which is private inside) and the module root must be seen inside.
func runInTestbed() int {
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench: finding this program: %v\n", err)
		return 2
	}
	cwd, err := os.Getwd()
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		return 2
	}
	binds := []string{filepath.Dir(exe), cwd}
	if root := moduleRoot(cwd); root != "" {
		binds = append(binds, root)
	}
	return testbed.Run(binds, cwd, append([]string{exe}, os.Args[1:]...))
}

// moduleRoot is the nearest directory at or above dir holding go.mod, or "".
func moduleRoot(dir string) string {
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d
		}
		if d == filepath.Dir(d) {
			return ""
		}
	}
}

func run(ctx context.Context, cfg config) error {
	begin := time.Now()
	load := loadAverage()
	t := &table{pct: 0.9, ratioOf: "cowfs"}
	var versions []string
	var errs []error
	for _, name := range cfg.backends {
		if !cfg.cowfs {
			break
		}
		p, err := openPool(ctx, name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		versions = append(versions, fmt.Sprintf("%s (%s; %s)", name, p.backend.Info().Version, p.where))
		err = benchPool(ctx, cfg, p, t)
		// Cleanup runs even when ctx was cancelled: a testbed left up by
		// `testbed up` keeps what we do not remove.
		if cerr := p.close(context.WithoutCancel(ctx)); cerr != nil {
			err = errors.Join(err, cerr)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
		if ctx.Err() != nil {
			break
		}
	}
	// The daemon's p99: of 200 calls it leaves out only the slowest 2, so
	// it shows the tail an agent meets, which p90 would hide.
	d := &table{pct: 0.99, ratioOf: "create"}
	// A promotion series has 5 runs by default: too few for a p90.
	pr := &table{pct: 0.9, ratioOf: "sandboxd", changed: true}
	sc := &table{pct: 0.99, ratioOf: "baseline"}
	fk := &table{pct: 0.9, ratioOf: "creates"}
	wp := &table{pct: 0.99, ratioOf: "baseline"}
	if cfg.usesDaemon() && ctx.Err() == nil {
		version, err := benchDaemon(ctx, cfg, d, pr, sc, fk, wp)
		if version != "" {
			versions = append(versions, version)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("daemon: %w", err))
		}
	}
	if len(t.rows) > 0 || len(d.rows) > 0 || len(pr.rows) > 0 || len(sc.rows) > 0 || len(fk.rows) > 0 || len(wp.rows) > 0 {
		printReport(os.Stdout, cfg, t, d, pr, sc, fk, wp, versions, time.Since(begin), load)
	}
	return errors.Join(errs...)
}

// printReport prints the tables with the few lines they need to be read:
// t of cowfs, d of the daemon, pr of promotions, sc at scale, fk of forks,
// wp of the warm pool; a part that did not run has no rows.
func printReport(w *os.File, cfg config, t, d, pr, sc, fk, wp *table, versions []string, took time.Duration, load string) {
	var uts unix.Utsname
	_ = unix.Uname(&uts)
	fmt.Fprintf(w, "Measured %s on Linux %s, %d CPUs (load average %s at the start, %s at the end): %s. Whole run: %v.\n",
		time.Now().Format("2006-01-02"), unix.ByteSliceToString(uts.Release[:]), runtime.NumCPU(),
		load, loadAverage(), strings.Join(versions, "; "), took.Round(time.Second))
	if len(t.rows) > 0 {
		printCowfs(w, cfg, t)
	}
	if len(d.rows) > 0 {
		printDaemon(w, cfg, d)
	}
	if len(fk.rows) > 0 {
		fmt.Fprint(w, "\nForks of a sandbox (make bench -parts fork):\n\n"+fk.markdown()+"\n"+forkNote+"\n")
		if fk.note != "" {
			fmt.Fprint(w, "\n"+fk.note+"\n")
		}
	}
	if len(pr.rows) > 0 {
		printPromotions(w, cfg, pr)
	}
	if len(sc.rows) > 0 {
		fmt.Fprint(w, "\nsandboxd at scale (make bench -parts scale):\n\n"+sc.markdown()+"\n"+sc.note+"\n")
	}
	if len(wp.rows) > 0 {
		fmt.Fprint(w, "\nThe warm pool (make bench -parts pool):\n\n"+wp.markdown()+"\n"+wp.note+"\n")
	}
}

// printCowfs prints the cowfs table and what it measured.
func printCowfs(w *os.File, cfg config, t *table) {
	fmt.Fprint(w, "\n"+t.markdown())
	fmt.Fprintf(w, "\nSizes that ran: %s. Each project: that many files of 200-800 bytes, 100 per directory. "+
		"Each time is the wall time of the call alone (setup excluded), after one untimed warm-up call; "+
		"page caches are not dropped, so reads are warm. Up to %d runs per snapshot, delete, change listing "+
		"or cp of fewer than %s files, %d per cp of more; fewer once a series has taken %v (at least 3, and 1 for cp); "+
		"p90 only with 10 runs or more. "+
		"Copies go into a new subvolume or dataset of the same pool; cp's time excludes write-back.\n",
		t.sizesRan(), cfg.reps, count(bigTree), cfg.copyReps, cfg.budget)
}

// printDaemon prints the daemon's table and what it measured.
func printDaemon(w *os.File, cfg config, d *table) {
	fmt.Fprint(w, "\nsandboxd, a systemd service, called over the system bus:\n\n"+d.markdown())
	fmt.Fprintf(w, "\nEach project: that many files of 200-800 bytes, 100 per directory, in a subvolume of the testbed's btrfs that the daemon's configuration names. "+
		"%d `CreateSandbox` calls in a row per project, from one Go client (godbus) on the system bus, each timed from the call to its reply, "+
		"which comes once the sandbox is ready (its two snapshots made, its scope started with its init in it, its record written); "+
		"then `DestroySandbox` of each, in the order made; one untimed create and destroy first. "+
		"p99 is nearest-rank, given with 100 calls or more. "+
		"Memory is read inside the testbed: the daemon's VmRSS (/proc/PID/status of the service's MainPID) with none and with all the sandboxes live; "+
		"Pss (smaps_rollup) shares each shared page among the processes that map it. "+
		"`cp -a` copies the project into a new subvolume of the same filesystem (its time excludes write-back), after the destroyed snapshots are cleaned; "+
		"runs as for the cowfs table. "+
		"The sandboxes have no user namespace (`[sandbox] userns = \"off\"`), except in the rows that say they have one: "+
		"for those the daemon is restarted with `userns = \"require\"` and `root_layers` the testbed root's two layers, "+
		"so that each sandbox maps a block of host ids and stacks idmapped mounts of those layers, its volume and the project; "+
		"their creates and commands are timed as above, with the same counts, after the rows without, and are given against them. "+
		processesNote+" "+filesNote+" "+portsNote+"\n", cfg.creates)
}

// loadAverage is the 1-minute load average: other work on the machine
// shows in the timings, and this says how much there was.
func loadAverage() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(data))
	if len(f) == 0 {
		return "unknown"
	}
	return f[0]
}

// progress prints a line on standard error.
func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench: "+format+"\n", args...)
}
