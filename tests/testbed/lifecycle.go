package testbed

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"
)

// bootScript runs as PID 1 of the new PID and mount namespaces: it builds
// the overlay root, pivots into it, and becomes systemd with a minimal
// target. A normal boot would run systemd-tmpfiles (which empties /tmp) and
// start every installed service; this target pulls in only the system bus.
const bootScript = `set -eu
mount --make-rprivate /
# The upper layer is a filesystem of its own (not a directory of the
# machine's root): a sandbox stacks both layers as lowers, and overlayfs
# refuses a lower layer inside another ("overlapping lowerdir path", ELOOP).
mount -o loop "$D/shared/root.img" "$D/layer"
mkdir -p "$D/layer/upper" "$D/layer/work"
mount -t overlay overlay -o "lowerdir=/,upperdir=$D/layer/upper,workdir=$D/layer/work" "$D/root"
mount -t proc proc "$D/root/proc"
mount --rbind /sys "$D/root/sys"
mount --rbind /dev "$D/root/dev"
mount -t tmpfs -o mode=755 tmpfs "$D/root/run"
# The root's layers, for sandboxes that stack idmapped copies of them (an
# overlay cannot itself be idmapped): the machine's root filesystem alone
# (not its submounts) and the testbed's upper layer, both read-only.
mkdir -p "$D/root$LAYERS/lower" "$D/root$LAYERS/upper"
mount --bind / "$D/root$LAYERS/lower"
mount -o remount,bind,ro "$D/root$LAYERS/lower"
mount --bind "$D/layer/upper" "$D/root$LAYERS/upper"
mount -o remount,bind,ro "$D/root$LAYERS/upper"
mount -t tmpfs -o mode=1777 tmpfs "$D/root/tmp"
IFS='
'
for b in $BINDS; do
	mkdir -p "$D/root$b"
	mount --bind "$b" "$D/root$b"
done
mkdir -p "$D/root/oldroot"
cd "$D/root"
pivot_root . oldroot
cd /
umount -l /oldroot
rmdir /oldroot
# A host of UpHosts runs in a cgroup namespace whose root is its own subtree
# (hostStage): the hierarchies are mounted anew, so that its systemd sees
# that subtree as the root of each and makes its slices there, apart from
# every other host's.
if [ -n "${CGMOUNTS:-}" ]; then
	mount -t tmpfs -o mode=755,nosuid,nodev,noexec tmpfs /sys/fs/cgroup
	for m in $CGMOUNTS; do
		name=${m%% *}
		rest=${m#* }
		mkdir -p "/sys/fs/cgroup/$name"
		mount -t "${rest%% *}" -o "${rest#* }" cgroup "/sys/fs/cgroup/$name"
	done
	mount -o remount,ro,mode=755,nosuid,nodev,noexec tmpfs /sys/fs/cgroup
fi
mkdir -p /run/systemd/system/dbus.socket.d /run/systemd/system/dbus.service.d
# Any service with default dependencies pulls in sysinit.target, whose units
# act on the whole machine (sysctl, modules, binfmt, the clock, /dev/log in
# the host's /dev, pstore, tmpfiles). Mask them all: only journald (private
# /run) and the system bus may run here.
mask() {
	for u in "$@"; do
		[ -e "/run/systemd/system/$u" ] || [ -L "/run/systemd/system/$u" ] || ln -s /dev/null "/run/systemd/system/$u"
	done
}
for w in /lib/systemd/system /etc/systemd/system; do
	for f in "$w"/sysinit.target.wants/* "$w"/sockets.target.wants/* "$w"/timers.target.wants/*; do
		[ -e "$f" ] || [ -L "$f" ] || continue
		case "${f##*/}" in
		systemd-journald.service | systemd-journald.socket | dbus.socket) ;;
		*) mask "${f##*/}" ;;
		esac
	done
done
mask systemd-journald-dev-log.socket systemd-journald-audit.socket systemd-journal-flush.service \
	systemd-tmpfiles-setup.service systemd-tmpfiles-setup-dev.service systemd-tmpfiles-clean.service \
	systemd-tmpfiles-clean.timer systemd-sysctl.service systemd-modules-load.service systemd-binfmt.service \
	proc-sys-fs-binfmt_misc.automount proc-sys-fs-binfmt_misc.mount systemd-timesyncd.service \
	systemd-udevd.service systemd-udev-trigger.service systemd-udev-settle.service systemd-pstore.service \
	systemd-random-seed.service dev-hugepages.mount dev-mqueue.mount zfs-fuse.service getty.target
printf '[Unit]\nDescription=sandboxd testbed\nDefaultDependencies=no\nWants=dbus.socket systemd-journald.socket\n' >/run/systemd/system/testbed.target
printf '[Unit]\nDefaultDependencies=no\n' >/run/systemd/system/dbus.socket.d/nodeps.conf
printf '[Unit]\nDefaultDependencies=no\n' >/run/systemd/system/dbus.service.d/nodeps.conf
echo "testbed: exec systemd"
exec "$SYSTEMD" --system --unit=testbed.target --log-target=kmsg --log-level=warning --show-status=0 </dev/null >/dev/null 2>&1
`

// Testbed is a running testbed, as held by the process that started it or
// attached to it.
type Testbed struct {
	Info
	lock   *os.File   // held while this process owns the testbed
	hosts  *hostsLock // a host's: the lock all of UpHosts' hosts share
	exited chan error // the systemd's exit, when this process is its parent
	// dieWithParent and logf are Up's Config's, for Reboot's boot.
	dieWithParent bool
	logf          func(string, ...any)
}

// Up brings a testbed up: it waits for any other testbed of this process's
// making to end, clears what a dead one left, boots systemd, and makes the
// btrfs filesystem and the zfs pool. The caller must call Down.
func Up(ctx context.Context, cfg Config) (tb *Testbed, err error) {
	if err := Preflight(); err != nil {
		return nil, err
	}
	begin := time.Now()
	base := cfg.dir()
	if err := os.MkdirAll(base, 0o700); err != nil {
		return nil, fmt.Errorf("making the testbed directory: %w", err)
	}
	lock, err := lockFile(ctx, lockPath, cfg.logf)
	if err != nil {
		return nil, err
	}
	tb = &Testbed{lock: lock, dieWithParent: cfg.DieWithParent, logf: cfg.Logf}
	defer func() {
		if err != nil {
			_ = tb.Down()
			tb = nil
		}
	}()
	if err := clearStale(base); err != nil {
		return tb, err
	}
	if err := clearStaleHosts(base); err != nil {
		return tb, err
	}
	if err := tb.make(ctx, cfg, instanceDir(base), true); err != nil {
		return tb, err
	}
	cfg.logf("testbed: up in %v (btrfs at %s, zfs pool %s)", time.Since(begin).Round(time.Millisecond), tb.Btrfs.Mount, tb.ZFS.Pool)
	return tb, nil
}

// make makes the testbed's files in dir, boots its systemd and provisions
// its btrfs filesystem (and its zfs pool, withZFS); tb holds the lock.
func (tb *Testbed) make(ctx context.Context, cfg Config, dir string, withZFS bool) error {
	begin := time.Now()
	tb.Dir = dir
	for _, sub := range []string{"layer", "root", "shared"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			return fmt.Errorf("making the testbed directory: %w", err)
		}
	}
	shared := filepath.Join(dir, "shared")
	tb.Binds = append(dedupBinds(cfg.Binds), shared)
	tb.Btrfs = Btrfs{
		Image:   filepath.Join(shared, "btrfs.img"),
		Mount:   BtrfsMount,
		Project: filepath.Join(BtrfsMount, projectName),
	}
	if withZFS {
		tb.ZFS = ZFS{
			Image:      filepath.Join(shared, "zfs.img"),
			Pool:       ZFSPool,
			Project:    ZFSPool + "/" + projectName,
			Mountpoint: filepath.Join(ZFSMount, projectName),
		}
	}
	btrfsMB, zfsMB := cfg.BtrfsMB, cfg.ZFSMB
	if btrfsMB == 0 {
		btrfsMB = defaultBtrfsMB
	}
	if zfsMB == 0 {
		zfsMB = defaultZFSMB
	}
	// The images are made from the host, before boot: mkfs needs nothing of
	// the namespace, and the files sit on the host's disk, not in the overlay.
	if err := sparseFile(tb.Btrfs.Image, btrfsMB<<20); err != nil {
		return err
	}
	if out, err := exec.CommandContext(ctx, "mkfs.btrfs", "-q", tb.Btrfs.Image).CombinedOutput(); err != nil {
		return fmt.Errorf("making btrfs on %s: %w: %s", tb.Btrfs.Image, err, strings.TrimSpace(string(out)))
	}
	if withZFS {
		if err := sparseFile(tb.ZFS.Image, zfsMB<<20); err != nil {
			return err
		}
	}
	// ext4, not btrfs: with a btrfs upper, copy-up into directories of the
	// machine's root failed with ENODATA (docs/userns.md).
	rootImage := filepath.Join(shared, rootImageName)
	if err := sparseFile(rootImage, rootLayerMB<<20); err != nil {
		return err
	}
	if out, err := exec.CommandContext(ctx, "mkfs.ext4", "-q", "-F", rootImage).CombinedOutput(); err != nil {
		return fmt.Errorf("making ext4 on %s: %w: %s", rootImage, err, strings.TrimSpace(string(out)))
	}

	if err := tb.boot(ctx, cfg.DieWithParent); err != nil {
		return err
	}
	cfg.logf("testbed: systemd up (pid %d) in %v", tb.PID, time.Since(begin).Round(time.Millisecond))
	tb.Layers = []string{filepath.Join(LayersDir, "upper"), filepath.Join(LayersDir, "lower")}
	if err := tb.provisionBtrfs(ctx); err != nil {
		return err
	}
	if withZFS {
		if err := tb.provisionZFS(ctx); err != nil {
			return err
		}
	}
	if err := tb.writeInfo(); err != nil {
		return err
	}
	return nil
}

// boot starts the boot script as PID 1 of new PID and mount namespaces and
// waits until systemd says the system is running.
func (tb *Testbed) boot(ctx context.Context, dieWithParent bool) error {
	logPath := filepath.Join(tb.Dir, bootLogName)
	logFile, err := os.Create(logPath)
	if err != nil {
		return fmt.Errorf("making the boot log: %w", err)
	}
	defer logFile.Close()
	cmd := exec.Command("/bin/sh", "-c", bootScript)
	cmd.Dir = "/"
	cmd.Env = []string{
		"PATH=/usr/sbin:/usr/bin:/sbin:/bin",
		"D=" + tb.Dir,
		"BINDS=" + strings.Join(tb.Binds, "\n"),
		"SYSTEMD=" + systemdBinary,
		"LAYERS=" + LayersDir,
	}
	if tb.Cgroup != "" {
		// A host: PID 1 joins its own subtree in every hierarchy, then
		// takes a cgroup namespace rooted there before it boots.
		dirs, mounts, err := makeSubtree(tb.Cgroup)
		if err != nil {
			return err
		}
		cmd.Args = []string{"/bin/sh", "-c", hostStage}
		cmd.Env = append(cmd.Env, "BOOT="+bootScript, "CGROUPS="+strings.Join(dirs, "\n"), "CGMOUNTS="+strings.Join(mounts, "\n"))
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{
		// Its own network namespace too: network tests (a listener on
		// "the host's" loopback, test hosts on veth pairs) touch nothing of
		// the machine's.
		Cloneflags: syscall.CLONE_NEWPID | syscall.CLONE_NEWNS | syscall.CLONE_NEWNET,
		Setsid:     true,
	}
	if dieWithParent {
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	// The kernel sends Pdeathsig when the *thread* that forked the child
	// exits. Fork from a goroutine locked to its thread that lives as long
	// as the testbed, so a Go runtime thread ending cannot kill it early.
	started := make(chan error, 1)
	tb.exited = make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the testbed
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		tb.exited <- cmd.Wait()
	}()
	if err := <-started; err != nil {
		tb.exited = nil
		return fmt.Errorf("starting the testbed in new PID and mount namespaces: %w", err)
	}
	tb.PID = cmd.Process.Pid
	if tb.StartTime, err = procStartTime(tb.PID); err != nil {
		return fmt.Errorf("reading the start time of the testbed's systemd: %w (boot log: %s)", err, tail(logPath, 10))
	}
	return waitFor(ctx, "the testbed's systemd to run", 60*time.Second, func() (bool, error) {
		select {
		case err := <-tb.exited:
			tb.exited <- err // keep it for Down
			return false, fmt.Errorf("systemd exited (%v); boot log:\n%s", err, tail(logPath, 20))
		default:
		}
		out, err := tb.Run(ctx, "systemctl", "is-system-running")
		state := strings.TrimSpace(out)
		switch state {
		case "running":
			return true, nil
		case "degraded":
			failed, _ := tb.Run(ctx, "systemctl", "--failed", "--no-legend")
			return false, fmt.Errorf("testbed systemd is degraded: %s", strings.TrimSpace(failed))
		}
		return false, fmt.Errorf("system state %q: %v", state, err)
	})
}

func (tb *Testbed) provisionBtrfs(ctx context.Context) error {
	steps := [][]string{
		{"mkdir", "-p", tb.Btrfs.Mount},
		{"mount", "-o", "loop", tb.Btrfs.Image, tb.Btrfs.Mount},
		{"btrfs", "subvolume", "create", tb.Btrfs.Project},
	}
	for _, argv := range steps {
		if _, err := tb.Run(ctx, argv...); err != nil {
			return fmt.Errorf("making the testbed's btrfs: %w", err)
		}
	}
	return nil
}

func (tb *Testbed) provisionZFS(ctx context.Context) error {
	if err := tb.startZFSFuse(ctx); err != nil {
		return err
	}
	steps := [][]string{
		{"zpool", "create", "-m", ZFSMount, tb.ZFS.Pool, tb.ZFS.Image},
		{"zfs", "create", tb.ZFS.Project},
	}
	for _, argv := range steps {
		if _, err := tb.Run(ctx, argv...); err != nil {
			return fmt.Errorf("making the testbed's zfs pool: %w", err)
		}
	}
	return nil
}

// startZFSFuse starts zfs-fuse in the testbed and waits until it answers.
func (tb *Testbed) startZFSFuse(ctx context.Context) error {
	zfsFuse, err := exec.LookPath("zfs-fuse")
	if err != nil {
		return err
	}
	// zfs-fuse runs as a service of the testbed's systemd, so it dies with
	// the namespace and its socket is in the testbed's private /run.
	if _, err := tb.Run(ctx, "systemd-run", "--quiet", "--unit="+zfsFuseUnit, "--property=DefaultDependencies=no", "--", zfsFuse, "--no-daemon", "--no-kstat-mount"); err != nil {
		return fmt.Errorf("starting zfs-fuse in the testbed: %w", err)
	}
	return waitFor(ctx, "zfs-fuse to answer", 30*time.Second, func() (bool, error) {
		_, err := tb.Run(ctx, "zpool", "list", "-H")
		return err == nil, err
	})
}

// Down ends the testbed: it kills its systemd (and so every process of its
// PID namespace), waits for its mounts and loop devices to go, removes its
// directory and releases the lock. It is safe to call more than once.
func (tb *Testbed) Down() error {
	var errs []error
	if tb.PID != 0 {
		if err := syscall.Kill(tb.PID, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, fmt.Errorf("killing the testbed's systemd (pid %d): %w", tb.PID, err))
		}
		if tb.exited != nil {
			select {
			case <-tb.exited:
			case <-time.After(30 * time.Second):
				errs = append(errs, fmt.Errorf("the testbed's systemd (pid %d) did not exit within 30s of SIGKILL", tb.PID))
			}
			tb.exited = nil
		} else if err := killAndWait(tb.PID, tb.StartTime); err != nil {
			errs = append(errs, err)
		}
		tb.PID = 0
	}
	if tb.Dir != "" {
		if err := removeInstance(tb.Dir); err != nil {
			errs = append(errs, err)
		}
	}
	if tb.Cgroup != "" {
		if err := removeSubtree(tb.Cgroup); err != nil {
			errs = append(errs, err)
		}
		tb.Cgroup = ""
	}
	if tb.lock != nil {
		tb.lock.Close() // releases the flock
		tb.lock = nil
	}
	if tb.hosts != nil {
		tb.hosts.release() // the last host's Down releases the flock
		tb.hosts = nil
	}
	return errors.Join(errs...)
}

// Attach finds the running testbed under base (DefaultDir when empty).
func Attach(base string) (*Testbed, error) {
	base = baseDir(base)
	info, err := readInfo(InfoPath(base))
	if errors.Is(err, os.ErrNotExist) {
		return nil, ErrNotUp
	}
	if err != nil {
		return nil, err
	}
	if !info.alive() {
		return nil, fmt.Errorf("%w (the one in %s is gone; `testbed down` clears what it left)", ErrNotUp, info.Dir)
	}
	return &Testbed{Info: *info}, nil
}

// Stop ends the testbed under base (DefaultDir when empty), and the hosts
// of UpHosts there, whether alive or left behind by a crash.
func Stop(ctx context.Context, base string) error {
	base = baseDir(base)
	lock, err := lockFile(ctx, lockPath, nil)
	if err != nil {
		return err
	}
	defer lock.Close()
	info, err := readInfo(InfoPath(base))
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return err
	default:
		if err := killAndWait(info.PID, info.StartTime); err != nil {
			return err
		}
	}
	// UpHosts' hosts under base, which a process without DieWithParent
	// may have left running.
	hostInfos, _ := filepath.Glob(filepath.Join(hostsDir(base), "*", "shared", stateFile))
	for _, path := range hostInfos {
		if info, err := readInfo(path); err == nil {
			if err := killAndWait(info.PID, info.StartTime); err != nil {
				return err
			}
		}
	}
	return errors.Join(removeInstance(instanceDir(base)), clearStaleHosts(base))
}

// lockFile takes an exclusive flock on path, waiting (and saying so once)
// while another process holds it.
func lockFile(ctx context.Context, path string, logf func(string, ...any)) (*os.File, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("making the testbed lock's directory: %w", err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening the testbed lock: %w", err)
	}
	said := false
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("locking %s: %w", path, err)
		}
		if !said && logf != nil {
			logf("testbed: waiting for another test binary's testbed to end (lock %s)", path)
			said = true
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("waiting for the testbed lock %s: %w", path, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func sparseFile(path string, size int64) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("making image %s: %w", path, err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		return fmt.Errorf("sizing image %s: %w", path, err)
	}
	return nil
}

// dedupBinds cleans the bind list: absolute, existing directories, none
// at or below another (a bind of the parent already shows it).
func dedupBinds(binds []string) []string {
	var clean []string
	for _, b := range binds {
		if !filepath.IsAbs(b) {
			continue
		}
		if st, err := os.Stat(b); err == nil && st.IsDir() {
			clean = append(clean, filepath.Clean(b))
		}
	}
	sort.Slice(clean, func(i, j int) bool { return len(clean[i]) < len(clean[j]) })
	var out []string
	for _, b := range clean {
		if !slices.ContainsFunc(out, func(o string) bool { return b == o || strings.HasPrefix(b, o+"/") }) {
			out = append(out, b)
		}
	}
	return out
}
