// Package boot is a booted sandbox's systemd, as its init starts and
// holds it: the boot stage that becomes it, the units it starts and
// those masked, and its namespaces, which the init's forker threads join.
// What the world has for it before the pivot is runtime/nsinit/world's
// (booted.go).
//
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
package boot

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/runtime/nsinit/world"
	"github.com/sandboxd/sandboxd/runtime/seccomp"
)

// bootTarget is the unit a booted sandbox's systemd starts: sysinit's
// few units that act on the sandbox alone, journald and sockets. The
// host's enabled services do not start; `systemctl start` names what
// runs.
const bootTarget = "sandbox.target"

// EnvVar marks the process that must run nsinit.Main (an init), and
// EnvStage is its value for the boot stage (Stage).
const (
	EnvVar   = "SANDBOXD_NSINIT"
	EnvStage = "boot"
)

// systemdPath is the host's systemd, as the sandbox sees it.
var systemdPath = "/lib/systemd/systemd"

// System is a booted sandbox's systemd as the init holds it.
type System struct {
	PID int // in the init's pid namespace
	// ns are its mount, pid and cgroup namespaces, which forker threads
	// join (setns) before their first fork.
	ns []*os.File
	// Ended is set once the reaper has its end.
	Ended atomic.Bool
}

// Join puts the calling thread (locked to its goroutine for good) in
// systemd's namespaces: a thread may setns into a mount namespace only
// with a file system context of its own.
func (y *System) Join() error {
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

// Start starts the sandbox's systemd (of sandbox id) through the boot stage, which
// moves itself into the payload cgroup (a descriptor of its cgroup.procs)
// and reports its errors, or nothing once it has exec'd systemd. The
// caller registers its pid with the reaper.
func Start(id string, payload *os.File, console *os.File) (*System, error) {
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
		Env: []string{EnvVar + "=" + EnvStage, "container=sandboxd", "container_uuid=" + id,
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
	y := &System{PID: pid}
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

// Stage is the process that becomes the sandbox's systemd: pid 1 of
// P2, root of U2, in B. It runs single-threaded work only on its locked
// thread, and never returns: it execs systemd or exits, having written
// why on fd 4.
func Stage() {
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
	if err := world.MountForSystemd(); err != nil {
		fmt.Fprint(report, err)
		os.Exit(1)
	}
	if err := seccomp.InstallBoot(); err != nil {
		fail("installing the boot filter", err)
	}
	argv := []string{systemdPath, "--unit=" + bootTarget, "--show-status=0"}
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, EnvVar+"=") {
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
