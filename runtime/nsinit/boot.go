package nsinit

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/runtime/seccomp"
)

// A booted sandbox (Spec.Boot) runs a systemd of its own, the host's
// binary and unit files through the overlay, so that the host's services
// start inside on the sandbox's copies of their files and data. The
// design, and what was measured, is docs/boot.md. In short:
//
//   - The init stays pid 1 of the sandbox (P1): it reaps, serves its
//     socket, and lives on if systemd ends. systemd is pid 1 of a nested
//     pid namespace (P2), in a nested user namespace (U2, the identity of
//     the init's) with a mount namespace of its own (B). Mounts copied
//     into a namespace of a less privileged user namespace are locked, so
//     a service's root, with every capability of U2, cannot unmount what
//     the init hid.
//   - The daemon makes the scope's payload/ cgroup, owned by the
//     sandbox's root, and passes its cgroup.procs; the boot stage moves
//     itself there, takes a cgroup namespace rooted there and mounts
//     cgroup2 for systemd.
//   - Commands join B, P2 and systemd's cgroup namespace, so that they
//     see its /proc and pids (`cat /run/nginx.pid` names what `ps`
//     shows); they stay the init's children, with today's capabilities
//     and filter. Once systemd has ended they are forked in the init's
//     own namespaces.

// shareProc makes the init's /proc a shared mount, unmasked, for a booted
// sandbox: systemd's namespace gets a copy of it that follows it (a
// slave, as that namespace's user namespace is less privileged), and the
// masks the init puts on it once systemd has mounted its own /proc over
// it (maskSystemProc) reach that copy too, locked: a service that
// unmounts systemd's /proc finds this one masked.
func shareProc(r *root) error {
	return r.at("/proc", func(p string) error { return unix.Mount("", p, "", unix.MS_SHARED, "") })
}

// maskSystemProc masks the init's /proc once the sandbox's systemd has
// its own (see shareProc).
func maskSystemProc() error {
	r, err := openRoot("/")
	if err != nil {
		return err
	}
	defer r.close()
	if err := maskProc(r); err != nil {
		return fmt.Errorf("masking the init's /proc: %w", err)
	}
	return nil
}

// maxServiceNamespaces bounds the namespaces of each kind a booted
// sandbox's services hold at once.
const maxServiceNamespaces = 1024

// bootTarget is the unit a booted sandbox's systemd starts: sysinit's
// few units that act on the sandbox alone, journald and sockets. The
// host's enabled services do not start; `systemctl start` names what
// runs.
const bootTarget = "sandbox.target"

// envBoot is envInit's value for the boot stage (bootStage).
const envBoot = "boot"

// systemdPath is the host's systemd, as the sandbox sees it.
var systemdPath = "/lib/systemd/systemd"

// system is a booted sandbox's systemd as the init holds it.
type system struct {
	pid int // in the init's pid namespace
	// ns are its mount, pid and cgroup namespaces, which forker threads
	// join (setns) before their first fork.
	ns    []*os.File
	ended atomic.Bool
}

// join puts the calling thread (locked to its goroutine for good) in
// systemd's namespaces: a thread may setns into a mount namespace only
// with a file system context of its own.
func (y *system) join() error {
	if err := unix.Unshare(unix.CLONE_FS); err != nil {
		return fmt.Errorf("joining the sandbox's systemd: unshare(CLONE_FS): %w", err)
	}
	for _, f := range y.ns {
		if err := unix.Setns(int(f.Fd()), 0); err != nil {
			return fmt.Errorf("joining the sandbox's systemd's %s: %w", f.Name(), err)
		}
	}
	return nil
}

// startSystem starts the sandbox's systemd through the boot stage, which
// moves itself into the payload cgroup (a descriptor of its cgroup.procs)
// and reports its errors, or nothing once it has exec'd systemd. The
// caller registers its pid with the reaper.
func startSystem(spec *Spec, payload *os.File, console *os.File) (*system, error) {
	if err := writeBootUnits(); err != nil {
		return nil, err
	}
	uids, err := identityMap("/proc/self/uid_map")
	if err != nil {
		return nil, err
	}
	gids, err := identityMap("/proc/self/gid_map")
	if err != nil {
		return nil, err
	}
	report, theirs, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("starting the sandbox's systemd: %w", err)
	}
	defer report.Close()
	null, err := os.Open(os.DevNull)
	if err != nil {
		theirs.Close()
		return nil, fmt.Errorf("starting the sandbox's systemd: %w", err)
	}
	defer null.Close()
	attr := &syscall.ProcAttr{
		Env: []string{envInit + "=" + envBoot, "container=sandboxd", "container_uuid=" + spec.ID,
			"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		Files: []uintptr{null.Fd(), console.Fd(), console.Fd(), payload.Fd(), theirs.Fd()},
		Sys: &syscall.SysProcAttr{
			Setsid:                     true,
			Cloneflags:                 syscall.CLONE_NEWPID | syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS,
			UidMappings:                uids,
			GidMappings:                gids,
			GidMappingsEnableSetgroups: true,
			Credential:                 &syscall.Credential{Uid: 0, Gid: 0},
		},
	}
	// The init's own binary, by its magic link: the sandbox's copy of
	// the path may be anything its root put there.
	pid, err := syscall.ForkExec("/proc/self/exe", []string{"sandboxd-boot"}, attr)
	theirs.Close()
	if err != nil {
		return nil, fmt.Errorf("starting the sandbox's systemd: %w", err)
	}
	y := &system{pid: pid}
	msg, _ := io.ReadAll(io.LimitReader(report, 4096))
	if len(msg) > 0 {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		var ws syscall.WaitStatus
		_, _ = syscall.Wait4(pid, &ws, 0, nil)
		return nil, fmt.Errorf("starting the sandbox's systemd: %s", strings.TrimSpace(string(msg)))
	}
	for _, ns := range []string{"mnt", "pid", "cgroup"} {
		f, err := os.Open(fmt.Sprintf("/proc/%d/ns/%s", pid, ns))
		if err != nil {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			return nil, fmt.Errorf("opening the %s namespace of the sandbox's systemd: %w", ns, err)
		}
		y.ns = append(y.ns, f)
	}
	return y, nil
}

// identityMap maps, in a nested user namespace, each id of this one to
// itself (path: this process's uid_map or gid_map): the same ids, the
// same host ids.
func identityMap(path string) ([]syscall.SysProcIDMap, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	defer f.Close()
	var out []syscall.SysProcIDMap
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) != 3 {
			continue
		}
		inside, err1 := strconv.Atoi(fields[0])
		count, err2 := strconv.Atoi(fields[2])
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("reading %s: bad line %q", path, sc.Text())
		}
		out = append(out, syscall.SysProcIDMap{ContainerID: inside, HostID: inside, Size: count})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("reading %s: no ids: the init has no user namespace of its own", path)
	}
	return out, sc.Err()
}

// bootStage is the process that becomes the sandbox's systemd: pid 1 of
// P2, root of U2, in B. It runs single-threaded work only on its locked
// thread, and never returns: it execs systemd or exits, having written
// why on fd 4.
func bootStage() {
	runtime.LockOSThread()
	// Closed by the exec: what runs as systemd (the sandbox's root may
	// have put anything at its path) cannot hold the init waiting.
	unix.CloseOnExec(4)
	report := os.NewFile(4, "report")
	fail := func(what string, err error) {
		fmt.Fprintf(report, "%s: %v", what, err)
		os.Exit(1)
	}
	if _, err := unix.Write(3, []byte("0")); err != nil {
		fail("moving into the payload cgroup", err)
	}
	unix.Close(3)
	if err := unix.Unshare(unix.CLONE_NEWCGROUP); err != nil {
		fail("making systemd's cgroup namespace", err)
	}
	r, err := openRoot("/")
	if err != nil {
		fail("opening the root", err)
	}
	// /proc of P2, masked as the commands' always is.
	for _, step := range []func(*root) error{mountProc, maskProc} {
		if err := step(r); err != nil {
			fail("mounting systemd's /proc", err)
		}
	}
	if err := r.mount("cgroup2", "/sys/fs/cgroup", "cgroup2", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		fail("mounting systemd's cgroup2", err)
	}
	r.close()
	if err := seccomp.InstallBoot(); err != nil {
		fail("installing the boot filter", err)
	}
	argv := []string{systemdPath, "--unit=" + bootTarget, "--show-status=0"}
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, envInit+"=") {
			env = append(env, kv)
		}
	}
	fail("running "+systemdPath, unix.Exec(argv[0], argv, env))
}

// maskedUnits are masked in every booted sandbox (besides what the
// targets' wants directories pull in, bootKeep aside): what acts on the
// machine (devices, network, time, logins, file systems) or waits for
// what a sandbox lacks.
var maskedUnits = []string{
	"systemd-journald-audit.socket", "systemd-udevd.service", "systemd-udev-trigger.service",
	"systemd-udev-settle.service", "networking.service", "ifupdown-wait-online.service",
	"systemd-networkd.service", "systemd-networkd-wait-online.service", "systemd-resolved.service",
	"systemd-timesyncd.service", "systemd-logind.service", "getty.target", "console-getty.service",
	"systemd-journal-flush.service", "systemd-hwdb-update.service", "systemd-remount-fs.service",
	"systemd-fsck-root.service",
}

// bootKeep are what sysinit and sockets want that touch only the
// sandbox's own files: its journal, its tmpfiles (/run/postgresql), its
// bus.
var bootKeep = map[string]bool{
	"systemd-journald.service": true, "systemd-journald.socket": true, "systemd-journald-dev-log.socket": true,
	"systemd-tmpfiles-setup.service": true, "dbus.socket": true,
}

// bootWants are the targets whose wants directories are masked (but for
// bootKeep): what default dependencies pull in. Timers, or apt-daily
// would run inside. multi-user.target's are the host's enabled services,
// which sandbox.target does not start (masking them would refuse
// `systemctl start nginx`).
var bootWants = []string{"sysinit", "sockets", "timers", "paths", "local-fs", "remote-fs",
	"network-online", "cryptsetup", "getty"}

// maskedGenerators read the machine's disks, fstab, consoles and kernel
// command line: nothing of a sandbox's. Packages' own generators
// (postgresql's) and the SysV one stay.
var maskedGenerators = []string{
	"systemd-cryptsetup-generator", "systemd-fstab-generator", "systemd-getty-generator",
	"systemd-gpt-auto-generator", "systemd-hibernate-resume-generator", "systemd-integritysetup-generator",
	"systemd-veritysetup-generator", "systemd-system-update-generator", "systemd-debug-generator",
	"systemd-run-generator", "systemd-rc-local-generator",
}

// writeBootUnits writes, in the sandbox's /run (after the pivot), the
// target systemd starts and the masks: /run/systemd/system outranks
// /etc and /lib.
func writeBootUnits() error {
	const dir = "/run/systemd/system"
	for _, d := range []string{dir, "/run/systemd/system-generators"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("writing the boot units: %w", err)
		}
	}
	target := "[Unit]\nDescription=sandboxd sandbox\nRequires=sysinit.target\nAfter=sysinit.target\n" +
		"Wants=sockets.target\nAfter=sockets.target\nAllowIsolate=yes\n"
	if err := os.WriteFile(dir+"/"+bootTarget, []byte(target), 0o644); err != nil {
		return fmt.Errorf("writing the boot units: %w", err)
	}
	masks := append([]string(nil), maskedUnits...)
	for _, base := range []string{"/lib/systemd/system", "/etc/systemd/system"} {
		for _, t := range bootWants {
			ents, _ := os.ReadDir(base + "/" + t + ".target.wants")
			for _, e := range ents {
				if !bootKeep[e.Name()] {
					masks = append(masks, e.Name())
				}
			}
		}
	}
	mask := func(p string) error {
		if err := os.Symlink("/dev/null", p); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("masking %s: %w", p, err)
		}
		return nil
	}
	for _, u := range masks {
		if err := mask(dir + "/" + u); err != nil {
			return err
		}
	}
	for _, g := range maskedGenerators {
		if err := mask("/run/systemd/system-generators/" + g); err != nil {
			return err
		}
	}
	return nil
}

// makeLogDirs makes the directories of the host's /var/log (dirs) in the
// sandbox's hidden, empty one, with their owners and modes: services
// expect theirs (nginx's error.log). Only paths below /var/log are made.
func makeLogDirs(r *root, dirs []Dir) error {
	for _, d := range dirs {
		if p := filepath.Clean(d.Path); p != d.Path || !strings.HasPrefix(p, "/var/log/") {
			return fmt.Errorf("log directory %q is not below /var/log", d.Path)
		}
	}
	return makeDirs(r, dirs)
}

// bootWorld is what build adds for a booted sandbox, before the pivot:
// the console (a file on the layer's volume, systemd's early words),
// /var/log's skeleton, a snakeoil pair of its own (snakeoil.go), and low
// ports for services, which are root of U2, not of the user namespace
// that owns the network's.
func bootWorld(r *root, spec *Spec, layer string) (*os.File, error) {
	if spec.Network == NetworkHost {
		return nil, errors.New("a booted sandbox needs a network of its own")
	}
	console, err := os.OpenFile(layer+"/console", os.O_WRONLY|os.O_CREATE|os.O_TRUNC|os.O_APPEND|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("making the console: %w", err)
	}
	fail := func(err error) (*os.File, error) {
		console.Close()
		return nil, err
	}
	err = r.at("/dev", func(dev string) error {
		fd, err := unix.Open(dev+"/console", unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return err
		}
		return unix.Close(fd)
	})
	if err != nil {
		return fail(fmt.Errorf("making /dev/console: %w", err))
	}
	if err := r.bind(layer+"/console", "/dev/console", false); err != nil {
		return fail(err)
	}
	if err := makeLogDirs(r, spec.LogDirs); err != nil {
		return fail(err)
	}
	if err := ownSnakeoil(r, spec.Hidden, spec.Hostname); err != nil {
		// Only the services that use it miss it: they say so at their start.
		fmt.Fprintf(os.Stderr, "sandbox %s: booted without a snakeoil pair of its own: %v\n", spec.ID, err)
	}
	err = r.at("/proc/sys/net/ipv4/ip_unprivileged_port_start", func(p string) error {
		return os.WriteFile(p, []byte("0"), 0)
	})
	if err != nil {
		return fail(fmt.Errorf("letting services bind low ports: %w", err))
	}
	// Services make namespaces (PrivateTmp=, PrivateUsers=, ...): all of
	// them are counted against this namespace's root, whose bounds only
	// the init can set (commands lack CAP_SYS_RESOURCE).
	for _, kind := range []string{"cgroup", "ipc", "mnt", "net", "pid", "time", "user", "uts"} {
		err := r.at("/proc/sys/user/max_"+kind+"_namespaces", func(p string) error {
			return os.WriteFile(p, []byte(strconv.Itoa(maxServiceNamespaces)), 0)
		})
		if err != nil && !errors.Is(err, unix.ENOENT) {
			return fail(fmt.Errorf("bounding the services' %s namespaces: %w", kind, err))
		}
	}
	return console, nil
}

// watchSystem hands systemd's end to the reaper: from then on commands
// are forked in the init's own namespaces (forking into a pid namespace
// whose init has ended fails), and the sandbox answers as before.
func (s *server) watchSystem() {
	ended := make(chan syscall.WaitStatus, 1)
	s.mu.Lock()
	s.waiting[s.system.pid] = ended
	s.mu.Unlock()
	go func() {
		ws := <-ended
		s.system.ended.Store(true)
		fmt.Fprintf(os.Stderr, "sandbox init: the sandbox's systemd ended (%v); commands now run in the init's namespaces\n", describe(ws))
	}()
}

// describe says how a process ended.
func describe(ws syscall.WaitStatus) string {
	if ws.Signaled() {
		return "signal " + ws.Signal().String()
	}
	return "status " + strconv.Itoa(ws.ExitStatus())
}
