package world

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// Build makes the sandbox's world in the init's new namespaces and pivots
// into it. It returns the control socket, bound at its host path before
// the host's root goes out of sight, listening; the directory of
// background processes' logs; and a booted sandbox's console.
func Build(spec *Spec, control *os.File, mounts *Mounts) (*net.UnixListener, *os.File, *os.File, error) {
	defer mounts.Close()
	defer control.Close()
	ln, logs, console, err := buildWorld(spec, control, mounts)
	if err != nil && logs != nil {
		logs.Close()
	}
	return ln, logs, console, err
}

// buildWorld is Build; it also returns the directory of background
// processes' logs, on the system layer's volume (outside the overlay:
// the sandbox does not see it; its disk quota counts it).
//
// A booted sandbox's world also has its console, returned open for the
// boot stage, and leaves /proc unmasked: systemd's own /proc, mounted in
// its namespace and masked there, may be mounted only while the copy of
// this one is fully visible (the kernel's mount_too_revealing). Commands
// see systemd's; this one only the init does.
func buildWorld(spec *Spec, control *os.File, mounts *Mounts) (ln *net.UnixListener, logs, console *os.File, err error) {
	defer func() {
		if err != nil && console != nil {
			console.Close()
			console = nil
		}
	}()
	// Nothing mounted here may reach the host: the namespace's copy of
	// the host's mounts stops sharing events with them first.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return nil, nil, nil, fmt.Errorf("making the sandbox's mounts private: %w", err)
	}
	newRoot := spec.Dir + "/root"
	var layer string
	if mounts != nil {
		newRoot, layer, err = mountIdmappedOverlay(spec, mounts)
	} else {
		layer, err = mountOverlay(spec, newRoot)
	}
	if err != nil {
		return nil, nil, nil, err
	}
	logs, err = openLogs(layer)
	if err != nil {
		return nil, nil, nil, err
	}
	r, err := openRoot(newRoot)
	if err != nil {
		return nil, logs, nil, err
	}
	defer r.close()
	scratch := scratchOptions(spec.ScratchSize)
	procMasks := maskProc
	if spec.Boot {
		procMasks = shareProc
	}
	for _, step := range []func(*root) error{
		mountProc, func(r *root) error { return mountDev(r, scratch, spec.UserNS) }, procMasks,
		func(r *root) error { return mountSys(r, spec.UserNS && spec.Network == NetworkHost) }, maskSys,
		func(r *root) error { return mountScratch(r, scratch) },
	} {
		if err := step(r); err != nil {
			return nil, logs, nil, err
		}
	}
	for _, p := range spec.Hidden {
		if err := hide(r, p); err != nil {
			return nil, logs, nil, err
		}
	}
	if len(spec.ProjectDirs) > 0 {
		if err := mountProjectDirs(r, spec.Project, spec.ProjectDirs, mounts); err != nil {
			return nil, logs, nil, err
		}
	} else if err := r.mkdirAll(spec.Project.Target, 0o755); err != nil {
		return nil, logs, nil, err
	} else if mounts != nil {
		// The daemon made it read-only (if asked) and without access times.
		if err := attachInside(r, mounts.Project, spec.Project.Target); err != nil {
			return nil, logs, nil, fmt.Errorf("mounting the project: %w", err)
		}
	} else if err := bindProject(r, spec.Project); err != nil {
		return nil, logs, nil, err
	}
	if err := mountCache(r, spec, mounts); err != nil {
		// A convenience, never a reason to fail: the daemon sees it is
		// not mounted, and sets no cache variables.
		fmt.Fprintf(os.Stderr, "sandbox %s: made without its owner's cache: %v\n", spec.ID, err)
	}
	for _, p := range spec.ReadOnly {
		if _, ok, err := r.stat(p); err != nil || !ok {
			continue // nothing there to protect
		}
		if err := r.bindInside(p, p, true); err != nil {
			return nil, logs, nil, err
		}
	}
	if spec.Boot {
		if console, err = bootWorld(r, spec, layer); err != nil {
			return nil, logs, nil, err
		}
	}
	ln, err = listen(control)
	if err != nil {
		return nil, logs, nil, err
	}
	if err := unix.Sethostname([]byte(spec.Hostname)); err != nil {
		return nil, logs, nil, fmt.Errorf("setting the hostname: %w", err)
	}
	if spec.Network != NetworkHost {
		if err := loopbackUp(); err != nil {
			return nil, logs, nil, err
		}
	}
	if err := pivot(r); err != nil {
		return nil, logs, nil, err
	}
	return ln, logs, console, nil
}

// bindProject binds the sandbox's copy of the project at its path.
func bindProject(r *root, project Bind) error {
	if err := r.bind(project.Source, project.Target, project.ReadOnly); err != nil {
		return err
	}
	// Reading a file must not change it: an atime update would show in
	// the sandbox's diff as a metadata change of every file it read.
	err := r.at(project.Target, func(target string) error {
		flags := uintptr(unix.MS_NOATIME)
		if project.ReadOnly {
			flags |= unix.MS_RDONLY
		}
		return remount(target, flags)
	})
	if err != nil {
		return fmt.Errorf("mounting the project at %s without access times: %w", project.Target, err)
	}
	return nil
}

// mountOverlay mounts the host's `/` with the sandbox's system layer over
// it on newRoot. Only `/`'s own filesystem shows through: other host
// mounts (pools, /home on its own disk, ...) are not in the lower layer.
func mountOverlay(spec *Spec, newRoot string) (string, error) {
	layer := spec.Layer
	if layer == "" {
		layer = spec.Dir + "/layer"
		if err := os.MkdirAll(layer, 0o700); err != nil {
			return "", fmt.Errorf("making the system layer: %w", err)
		}
		opts := "mode=0700"
		if spec.LayerSize > 0 {
			opts += fmt.Sprintf(",size=%d", spec.LayerSize)
		}
		if err := unix.Mount("sandbox-layer", layer, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
			return "", fmt.Errorf("mounting the system layer's tmpfs on %s: %w", layer, err)
		}
	}
	upper, work := layer+"/upper", layer+"/work"
	for _, d := range []string{upper, work} {
		if strings.ContainsAny(d, ",:\\") {
			return "", fmt.Errorf("the system layer's path %s has a character overlayfs options cannot carry", d)
		}
		if err := os.MkdirAll(d, 0o755); err != nil {
			return "", fmt.Errorf("making the system layer: %w", err)
		}
	}
	opts := "lowerdir=/,upperdir=" + upper + ",workdir=" + work
	if err := unix.Mount("sandbox", newRoot, "overlay", 0, opts); err != nil {
		if errors.Is(err, unix.ELOOP) {
			return "", fmt.Errorf("mounting the sandbox's root (overlay of / with upper layer %s): the layer is on the root filesystem itself: %w", upper, err)
		}
		return "", fmt.Errorf("mounting the sandbox's root (overlay of / with upper layer %s): %w", upper, err)
	}
	return layer, nil
}

func mountProc(r *root) error {
	if err := r.mkdirAll("/proc", 0o555); err != nil {
		return err
	}
	return r.mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "")
}

// Device nodes a program may expect; nothing that reaches hardware.
var devices = []struct {
	name         string
	major, minor uint32
}{
	{"null", 1, 3}, {"zero", 1, 5}, {"full", 1, 7}, {"random", 1, 8}, {"urandom", 1, 9}, {"tty", 5, 0},
}

func mountDev(r *root, scratch string, userns bool) error {
	if err := r.mkdirAll("/dev", 0o755); err != nil {
		return err
	}
	if err := r.mount("sandbox-dev", "/dev", "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, "mode=0755,size=64k"); err != nil {
		return err
	}
	for _, d := range devices {
		if userns {
			if err := bindDevice(r, d.name); err != nil {
				return err
			}
			continue
		}
		err := r.at("/dev", func(dev string) error {
			return unix.Mknod(dev+"/"+d.name, unix.S_IFCHR|0o666, int(unix.Mkdev(d.major, d.minor)))
		})
		if err != nil {
			return fmt.Errorf("making /dev/%s in the sandbox: %w", d.name, err)
		}
		// mknod obeys the umask; the nodes are for everyone.
		if err := r.at("/dev/"+d.name, func(p string) error { return unix.Chmod(p, 0o666) }); err != nil {
			return err
		}
	}
	for _, d := range []string{"/dev/pts", "/dev/shm"} {
		if err := r.mkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if err := r.mount("devpts", "/dev/pts", "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620"); err != nil {
		return err
	}
	if err := r.mount("sandbox-shm", "/dev/shm", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=1777,"+scratch); err != nil {
		return err
	}
	return r.at("/dev", func(dev string) error {
		for name, target := range map[string]string{
			"ptmx": "pts/ptmx", "fd": "/proc/self/fd", "stdin": "/proc/self/fd/0",
			"stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2",
		} {
			if err := unix.Symlinkat(target, unix.AT_FDCWD, dev+"/"+name); err != nil {
				return fmt.Errorf("making /dev/%s in the sandbox: %w", name, err)
			}
		}
		return nil
	})
}

// maskProc keeps /proc's doors to the host's kernel shut even for a
// sandbox's root: sysctls and sysrq read-only; kernel memory, keys,
// timers and the scheduler's debug output masked; the host's hardware
// (ACPI, sound, SCSI) out of sight. These are runc's masked and
// read-only paths.
func maskProc(r *root) error {
	for _, p := range []string{"/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus", "/proc/fs"} {
		if _, ok, err := r.stat(p); err != nil || !ok {
			continue
		}
		if err := r.bindInside(p, p, true); err != nil {
			return err
		}
	}
	return mask(r, maskedProc)
}

// maskedProc and maskedSys are hidden: an empty read-only directory in
// place of a directory, /dev/null in place of a file.
var (
	maskedProc = []string{
		"/proc/kcore", "/proc/keys", "/proc/key-users", "/proc/timer_list", "/proc/timer_stats",
		"/proc/sched_debug", "/proc/latency_stats", "/proc/kallsyms", "/proc/kmsg",
		"/proc/kpagecount", "/proc/kpageflags", "/proc/kpagecgroup", "/proc/vmallocinfo",
		"/proc/acpi", "/proc/asound", "/proc/scsi", "/proc/driver", "/proc/tty/driver",
	}
	// The powercap's energy counters are a side channel (PLATYPUS).
	maskedSys = []string{
		"/sys/firmware", "/sys/kernel/debug", "/sys/kernel/tracing", "/sys/kernel/security",
		"/sys/devices/virtual/powercap", "/sys/fs/bpf",
	}
)

func maskSys(r *root) error { return mask(r, maskedSys) }

func mask(r *root, paths []string) error {
	for _, p := range paths {
		st, ok, err := r.stat(p)
		if err != nil || !ok {
			continue
		}
		if st.Mode&unix.S_IFMT == unix.S_IFDIR {
			err = r.mount("sandbox-masked", p, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=0555,size=4k,nr_inodes=1")
		} else {
			err = r.bindInside("/dev/null", p, true)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func mountSys(r *root, bindHost bool) error {
	if err := r.mkdirAll("/sys", 0o555); err != nil {
		return err
	}
	if bindHost {
		return bindSys(r)
	}
	return r.mount("sysfs", "/sys", "sysfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "")
}

// mountScratch gives the sandbox its own /tmp, /var/tmp and /run (the
// host's /run holds the system bus's and sandboxd's sockets; its /var/tmp
// services' private temporary files), each of a bounded size (scratch:
// tmpfs options).
func mountScratch(r *root, scratch string) error {
	for _, m := range []struct{ path, opts string }{{"/tmp", "mode=1777"}, {"/var/tmp", "mode=1777"}, {"/run", "mode=0755"}} {
		if err := r.mkdirAll(m.path, 0o755); err != nil {
			return err
		}
		if err := r.mount("sandbox-"+m.path[1:], m.path, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, m.opts+","+scratch); err != nil {
			return err
		}
	}
	return nil
}

// scratchOptions are the size options of /tmp, /run and /dev/shm, each
// of size bytes (0: ScratchSize's default). Their pages are charged to
// the sandbox's memory limit anyway; a size keeps one of them from
// taking all of it, and nr_inodes keeps empty files from doing so.
func scratchOptions(size uint64) string {
	if size == 0 {
		size = defaultScratchSize()
	}
	return fmt.Sprintf("size=%d,nr_inodes=%d", size, max(size/4096, 16384))
}

// defaultScratchSize is a quarter of the sandbox's default MemoryMax (a
// quarter of the host's memory, at most 4GiB): a sixteenth of the host's
// memory, at most 1GiB.
func defaultScratchSize() uint64 {
	size := uint64(1 << 30)
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) == nil {
		size = min(size, uint64(si.Totalram)*uint64(si.Unit)/16)
	}
	return max(size, 16<<20)
}

// ScratchSizeFor is the size of each of /tmp, /run and /dev/shm in a
// sandbox whose MemoryMax is memoryMax (0: none): a quarter of it.
func ScratchSizeFor(memoryMax uint64) uint64 {
	if memoryMax == 0 {
		return 0
	}
	return max(memoryMax/4, 16<<20)
}

// hide puts an empty directory (a tmpfs, writable by root only) or an
// empty file in place of host path p, if it exists.
func hide(r *root, p string) error {
	st, ok, err := r.stat(p)
	if err != nil || !ok {
		return err
	}
	if st.Mode&unix.S_IFMT == unix.S_IFLNK {
		// A hidden path that is a symlink (/home -> /srv/home): what it
		// points to, inside the root, is what must not be seen.
		target, err := r.resolve(p)
		if err != nil {
			return nil // it points nowhere: nothing to hide
		}
		if target == "/" {
			return fmt.Errorf("hidden path %s points to the whole root", p)
		}
		return hide(r, target)
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return r.mount("sandbox-hidden", p, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755")
	}
	return r.bindInside("/dev/null", p, true)
}

// listen listens on the control socket the daemon bound (the init's pid
// is then what its peers see).
func listen(control *os.File) (*net.UnixListener, error) {
	if err := unix.Listen(int(control.Fd()), 64); err != nil {
		return nil, fmt.Errorf("listening on the control socket: %w", err)
	}
	l, err := net.FileListener(control)
	if err != nil {
		return nil, fmt.Errorf("listening on the control socket: %w", err)
	}
	ln := l.(*net.UnixListener)
	ln.SetUnlinkOnClose(false) // the path is the daemon's to remove
	return ln, nil
}

// loopbackUp brings up lo, the only interface of a new network namespace.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("bringing up loopback: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("bringing up loopback: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("bringing up loopback: %w", err)
	}
	return nil
}

// pivot makes the new root the root, and lets go of the host's.
func pivot(r *root) error {
	if err := unix.Fchdir(r.fd); err != nil {
		return fmt.Errorf("entering the new root: %w", err)
	}
	// pivot_root(".", ".") stacks the old root on top of the new one,
	// where it is unmounted: no directory for it is needed.
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root into %s: %w", r.path, err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("letting go of the host's root: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return err
	}
	return nil
}

// openLogs makes and opens the logs' directory in the system layer's
// volume at layer (before the pivot hides it).
func openLogs(layer string) (*os.File, error) {
	dir := layer + "/processes"
	if err := os.Mkdir(dir, 0o700); err != nil && !os.IsExist(err) {
		return nil, fmt.Errorf("making the processes' log directory: %w", err)
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("opening the processes' log directory: %w", err)
	}
	f := os.NewFile(uintptr(fd), dir)
	// An init started again (after a reboot, a rollback) knows none of
	// the processes of the one before: their logs go, or they would sit
	// in the quota with no one to read or remove them.
	if names, err := f.Readdirnames(-1); err == nil {
		for _, n := range names {
			_ = unix.Unlinkat(fd, n, 0)
		}
	}
	if _, err := f.Seek(0, 0); err != nil {
		f.Close()
		return nil, fmt.Errorf("opening the processes' log directory: %w", err)
	}
	return f, nil
}
