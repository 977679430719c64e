package testbed

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// cgroupTop is the directory below the root of every cgroup hierarchy that
// holds the hosts' subtrees, one per host, named as the host.
const cgroupTop = "sandboxd-testbed"

// cgroupRoot is where the machine mounts its cgroup hierarchies.
const cgroupRoot = "/sys/fs/cgroup"

// hostStage runs first as PID 1 of a host's namespaces: it moves itself
// into the host's subtree in every hierarchy (0 is the writer itself), then
// takes a cgroup namespace rooted there and runs the boot script, which
// mounts the hierarchies anew. Two systemds so placed share no cgroup.
const hostStage = `set -eu
IFS='
'
for c in $CGROUPS; do
	echo 0 >"$c/cgroup.procs"
done
exec unshare --cgroup /bin/sh -c "$BOOT"
`

var hostName = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,31}$`)

// hostsDir holds the hosts' instance directories under base.
func hostsDir(base string) string { return filepath.Join(base, "hosts") }

// hostsLock is the machine-wide testbed lock that UpHosts' hosts share:
// the last host's Down releases it.
type hostsLock struct {
	mu sync.Mutex
	f  *os.File
	n  int
}

func (l *hostsLock) release() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n--; l.n == 0 && l.f != nil {
		l.f.Close()
		l.f = nil
	}
}

// UpHosts brings up one testbed per name at once, each a host of its own:
// its own systemd (in a cgroup namespace of its own, so the systemds share
// no cgroup), system bus, network namespace, btrfs pool at BtrfsMount with
// the project subvolume at tb.Btrfs.Project (no ZFS pool: Info.ZFS is
// empty), and its own directory (base/hosts/NAME). It holds the
// machine-wide testbed lock (no other testbed runs meanwhile) until the
// last host's Down. cfg.Binds are bound into every host (the repository,
// bin/). Each returned Testbed's Down ends that host alone; with
// cfg.DieWithParent every host dies with this process.
func UpHosts(ctx context.Context, cfg Config, names ...string) (hosts []*Testbed, err error) {
	if len(names) == 0 {
		return nil, errors.New("testbed hosts: no names given")
	}
	for i, name := range names {
		if !hostName.MatchString(name) {
			return nil, fmt.Errorf("testbed hosts: name %q: want lower-case letters, digits and dashes", name)
		}
		if slices.Contains(names[:i], name) {
			return nil, fmt.Errorf("testbed hosts: name %q given twice", name)
		}
	}
	if err := Preflight(); err != nil {
		return nil, err
	}
	begin := time.Now()
	base := cfg.dir()
	if err := os.MkdirAll(hostsDir(base), 0o700); err != nil {
		return nil, fmt.Errorf("making the testbed directory: %w", err)
	}
	f, err := lockFile(ctx, lockPath, cfg.logf)
	if err != nil {
		return nil, err
	}
	lock := &hostsLock{f: f, n: len(names)}
	for range names {
		hosts = append(hosts, &Testbed{hosts: lock, dieWithParent: cfg.DieWithParent, logf: cfg.Logf})
	}
	defer func() {
		if err != nil {
			for _, tb := range hosts {
				_ = tb.Down()
			}
			hosts = nil
		}
	}()
	if err := clearStale(base); err != nil {
		return hosts, err
	}
	if err := clearStaleHosts(base); err != nil {
		return hosts, err
	}
	for i, name := range names {
		tb := hosts[i]
		tb.Cgroup = filepath.Join(cgroupTop, name)
		if err := tb.make(ctx, cfg, filepath.Join(hostsDir(base), name), false); err != nil {
			return hosts, fmt.Errorf("testbed host %s: %w", name, err)
		}
		cfg.logf("testbed: host %s up (systemd pid %d)", name, tb.PID)
	}
	cfg.logf("testbed: %d hosts up in %v", len(names), time.Since(begin).Round(time.Millisecond))
	return hosts, nil
}

// clearStaleHosts removes what dead hosts left under base, and the
// subtrees of dead hosts in the cgroup hierarchies (whatever their base),
// or reports ErrBusy when one is alive. The caller holds the lock.
func clearStaleHosts(base string) error {
	for _, b := range []string{base, DefaultDir} {
		infos, _ := filepath.Glob(filepath.Join(hostsDir(b), "*", "shared", stateFile))
		for _, path := range infos {
			if info, err := readInfo(path); err == nil && info.alive() {
				return fmt.Errorf("%w: testbed host in %s (systemd pid %d)", ErrBusy, info.Dir, info.PID)
			}
		}
	}
	dirs, _ := filepath.Glob(filepath.Join(hostsDir(base), "*"))
	var errs []error
	for _, dir := range dirs {
		if err := removeInstance(dir); err != nil {
			errs = append(errs, err)
		}
	}
	names, err := subtrees()
	if err != nil {
		return err
	}
	for _, name := range names {
		sub := filepath.Join(cgroupTop, name)
		if pids, _ := SubtreeProcs(sub); len(pids) > 0 {
			return fmt.Errorf("%w: cgroup %s holds processes %v", ErrBusy, sub, pids)
		}
		if err := removeSubtree(sub); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// BusAddress is the host's system bus as a D-Bus address that a process
// outside the host can dial (as root: the bus sees the same uid).
func (tb *Testbed) BusAddress() string {
	return fmt.Sprintf("unix:path=/proc/%d/root/run/dbus/system_bus_socket", tb.PID)
}

// InstallServiceOn installs and starts sandboxd in the testbed from
// outside it, as InstallService does from inside: config as
// /etc/sandboxd/sandboxd.toml, the repository's bus policy, the unit (in
// /run/systemd/system) running bin, daemon-reload, start. It returns once
// the daemon said READY=1. repo and bin are paths inside the testbed (a
// bind shows them at the same path).
func (tb *Testbed) InstallServiceOn(ctx context.Context, repo, bin, config string) error {
	if tb.PID == 0 {
		return fmt.Errorf("installing sandboxd: %w", ErrNotUp)
	}
	root := fmt.Sprintf("/proc/%d/root", tb.PID)
	policy, err := os.ReadFile(filepath.Join(root, repo, "packaging", "dbus", "org.sandboxd1.conf"))
	if err != nil {
		return fmt.Errorf("installing sandboxd: %w", err)
	}
	unit, err := os.ReadFile(filepath.Join(root, repo, "packaging", "systemd", "sandboxd.service"))
	if err != nil {
		return fmt.Errorf("installing sandboxd: %w", err)
	}
	unit = []byte(strings.ReplaceAll(string(unit), "ExecStart=/usr/bin/sandboxd", "ExecStart="+bin))
	files := []struct {
		path string
		data []byte
	}{
		{"/etc/sandboxd/sandboxd.toml", []byte(config)},
		{"/etc/dbus-1/system.d/org.sandboxd1.conf", policy},
		{"/run/systemd/system/sandboxd.service", unit},
	}
	for _, f := range files {
		path := filepath.Join(root, f.path)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return fmt.Errorf("installing sandboxd: %w", err)
		}
		if err := os.WriteFile(path, f.data, 0o644); err != nil {
			return fmt.Errorf("installing sandboxd: %w", err)
		}
	}
	for _, argv := range [][]string{
		{"busctl", "call", "org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus", "ReloadConfig"},
		{"systemctl", "daemon-reload"},
		{"systemctl", "start", "sandboxd.service"}, // Type=notify: returns once ready
	} {
		if _, err := tb.Run(ctx, argv...); err != nil {
			return fmt.Errorf("installing sandboxd: %w", err)
		}
	}
	return nil
}

// hierarchy is one of the machine's cgroup hierarchies.
type hierarchy struct {
	dir    string // its mount point, below cgroupRoot
	fstype string // cgroup or cgroup2
	opts   string // its super options (rw,memory; rw,name=systemd; ...)
}

// hierarchies lists the cgroup hierarchies mounted below cgroupRoot.
func hierarchies() ([]hierarchy, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var hs []hierarchy
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTS
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		fields, after := strings.Fields(pre), strings.Fields(post)
		if !ok || len(fields) < 5 || len(after) < 3 {
			continue
		}
		mp := unescapeMount(fields[4])
		if (after[0] != "cgroup" && after[0] != "cgroup2") || filepath.Dir(mp) != cgroupRoot {
			continue
		}
		if slices.ContainsFunc(hs, func(h hierarchy) bool { return h.dir == mp }) {
			continue
		}
		hs = append(hs, hierarchy{dir: mp, fstype: after[0], opts: after[2]})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(hs) == 0 {
		return nil, fmt.Errorf("no cgroup hierarchy mounted below %s", cgroupRoot)
	}
	return hs, nil
}

// makeSubtree makes sub in every hierarchy; it returns those directories
// and, for the boot script, each hierarchy as "NAME FSTYPE OPTIONS".
func makeSubtree(sub string) (dirs, mounts []string, err error) {
	hs, err := hierarchies()
	if err != nil {
		return nil, nil, err
	}
	for _, h := range hs {
		dir := filepath.Join(h.dir, sub)
		// A new cpuset (v1) has no CPUs and no memory nodes, and takes no
		// process: each level gets its parent's.
		rel := strings.Split(sub, "/")
		for i := range rel {
			level := filepath.Join(append([]string{h.dir}, rel[:i+1]...)...)
			if err := os.Mkdir(level, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
				return nil, nil, fmt.Errorf("making cgroup %s: %w", level, err)
			}
			for _, file := range []string{"cpuset.cpus", "cpuset.mems"} {
				parent, err := os.ReadFile(filepath.Join(filepath.Dir(level), file))
				if err != nil {
					continue // not a cpuset hierarchy
				}
				if err := os.WriteFile(filepath.Join(level, file), parent, 0o644); err != nil {
					return nil, nil, fmt.Errorf("setting cgroup %s's %s: %w", level, file, err)
				}
			}
		}
		dirs = append(dirs, dir)
		mounts = append(mounts, fmt.Sprintf("%s %s %s", filepath.Base(h.dir), h.fstype, h.opts))
	}
	return dirs, mounts, nil
}

// removeSubtree removes sub, and what systemd made below it, from every
// hierarchy, deepest first; it waits a while for the processes of a host
// just killed to leave. cgroupTop goes too once no host uses it.
func removeSubtree(sub string) error {
	hs, err := hierarchies()
	if err != nil {
		return err
	}
	var errs []error
	for _, h := range hs {
		dir := filepath.Join(h.dir, sub)
		var cgs []string
		_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				cgs = append(cgs, path)
			}
			return nil
		})
		slices.Reverse(cgs)
		for _, cg := range cgs {
			err := waitFor(context.Background(), "cgroup "+cg+" to empty", 15*time.Second, func() (bool, error) {
				err := syscall.Rmdir(cg)
				return err == nil || errors.Is(err, syscall.ENOENT), err
			})
			if err != nil {
				errs = append(errs, fmt.Errorf("removing cgroup %s: %w", cg, err))
			}
		}
		_ = syscall.Rmdir(filepath.Join(h.dir, cgroupTop)) // busy while another host runs
	}
	return errors.Join(errs...)
}

// subtrees lists the names of the hosts' subtrees found in any hierarchy.
func subtrees() ([]string, error) {
	hs, err := hierarchies()
	if err != nil {
		return nil, err
	}
	var names []string
	for _, h := range hs {
		entries, _ := os.ReadDir(filepath.Join(h.dir, cgroupTop))
		for _, e := range entries {
			if e.IsDir() && !slices.Contains(names, e.Name()) {
				names = append(names, e.Name())
			}
		}
	}
	return names, nil
}

// SubtreeProcs lists the processes (host pids) in cgroup sub or below it,
// in any hierarchy: a host's (its Info.Cgroup) while it runs, none once
// it is down.
func SubtreeProcs(sub string) ([]int, error) {
	hs, err := hierarchies()
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, h := range hs {
		_ = filepath.WalkDir(filepath.Join(h.dir, sub), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
				return nil
			}
			data, _ := os.ReadFile(path)
			for _, f := range strings.Fields(string(data)) {
				if pid, err := strconv.Atoi(f); err == nil && !slices.Contains(pids, pid) {
					pids = append(pids, pid)
				}
			}
			return nil
		})
	}
	return pids, nil
}

// SubtreeExists says whether cgroup sub is left in any hierarchy.
func SubtreeExists(sub string) bool {
	hs, err := hierarchies()
	if err != nil {
		return false
	}
	for _, h := range hs {
		if _, err := os.Stat(filepath.Join(h.dir, sub)); err == nil {
			return true
		}
	}
	return false
}
