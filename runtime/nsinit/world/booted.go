package world

// What a booted sandbox's world has besides (see runtime/nsinit/boot,
// and docs/boot.md): /proc shared with systemd's namespace and masked
// once systemd has its own, the console, /var/log's skeleton, a snakeoil
// pair of its own, low ports and bounds on the services' namespaces.

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// shareProc makes the init's /proc a shared mount, unmasked, for a booted
// sandbox: systemd's namespace gets a copy of it that follows it (a
// slave, as that namespace's user namespace is less privileged), and the
// masks the init puts on it once systemd has mounted its own /proc over
// it (MaskSystemProc) reach that copy too, locked: a service that
// unmounts systemd's /proc finds this one masked.
func shareProc(r *root) error {
	return r.at("/proc", func(p string) error { return unix.Mount("", p, "", unix.MS_SHARED, "") })
}

// MountForSystemd mounts, in the boot stage's own mount namespace, the
// /proc of its pid namespace, masked as the commands' always is, and the
// cgroup2 of its cgroup namespace. The error says which step failed.
func MountForSystemd() error {
	r, err := openRoot("/")
	if err != nil {
		return fmt.Errorf("opening the root: %w", err)
	}
	defer r.close()
	for _, step := range []func(*root) error{mountProc, maskProc} {
		if err := step(r); err != nil {
			return fmt.Errorf("mounting systemd's /proc: %w", err)
		}
	}
	if err := r.mount("cgroup2", "/sys/fs/cgroup", "cgroup2", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mounting systemd's cgroup2: %w", err)
	}
	return nil
}

// MaskSystemProc masks the init's /proc once the sandbox's systemd has
// its own (see shareProc).
func MaskSystemProc() error {
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

// bootWorld is what Build adds for a booted sandbox, before the pivot:
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
