package nsinit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/pidwatch"
)

// Init is a sandbox's init that Launch started and Build has not yet
// (or has) given its world.
type Init struct {
	// PID is the init's pid, in the caller's PID namespace.
	PID int
	// Process tells when the init ended: it is reaped then, and must not
	// be waited for otherwise.
	Process *pidwatch.Process
	setup   *os.File
	ids     *IDMap
}

// Launch starts argv (a program whose main calls Main when IsInit) as the
// init of a new sandbox: in new mount, PID, UTS, IPC and (unless network
// is the host's) network namespaces, in its own session so that it
// outlives the daemon. The init waits for Build; meanwhile the caller can
// make the sandbox's volumes and move the pid into its scope. It is
// reaped when it ends (Process).
//
// With ids, the init is also in a new user namespace of that map, as its
// root: root in the sandbox, ids's host ids outside it. Its world is
// then built from idmapped mounts (IdmapMounts) rather than host paths.
func Launch(argv []string, network string, ids *IDMap) (*Init, error) {
	if len(argv) == 0 {
		return nil, errors.New("starting a sandbox's init: no command")
	}
	flags := syscall.CLONE_NEWNS | syscall.CLONE_NEWPID | syscall.CLONE_NEWUTS | syscall.CLONE_NEWIPC
	if network != NetworkHost {
		flags |= syscall.CLONE_NEWNET
	}
	return launch(argv, flags, ids)
}

// launch starts argv with the clone flags, in a user namespace of ids if
// given, waiting for its spec on fd 3.
func launch(argv []string, flags int, ids *IDMap) (*Init, error) {
	if ids != nil {
		if err := ids.Validate(); err != nil {
			return nil, fmt.Errorf("starting a sandbox's init: %w", err)
		}
	}
	// One datagram carries the spec and the descriptors of its mounts.
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("starting a sandbox's init: %w", err)
	}
	// Ours is non-blocking, for Build's deadline; theirs blocks.
	if err := unix.SetNonblock(fds[0], true); err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return nil, fmt.Errorf("starting a sandbox's init: %w", err)
	}
	ours := os.NewFile(uintptr(fds[0]), "init-setup")
	theirs := os.NewFile(uintptr(fds[1]), "init-setup")
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), envInit+"=1")
	cmd.ExtraFiles = []*os.File{theirs} // fd 3
	cmd.Stderr = os.Stderr              // the init's own complaints reach the journal
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Cloneflags: uintptr(flags)}
	if ids != nil {
		cmd.SysProcAttr.Cloneflags |= syscall.CLONE_NEWUSER
		cmd.SysProcAttr.UidMappings = sysMaps(ids.UIDs)
		cmd.SysProcAttr.GidMappings = sysMaps(ids.GIDs)
		// Commands take their user's groups (setgroups), inside the map.
		cmd.SysProcAttr.GidMappingsEnableSetgroups = true
		// Root of the new namespace: without it, the init keeps the
		// daemon's uid 0, which the namespace does not map.
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: 0, Gid: 0}
	}
	if ids != nil {
		err = startOwnedBy(cmd, ids.RootUID(), ids.RootGID())
	} else {
		err = cmd.Start()
	}
	theirs.Close()
	if err != nil {
		ours.Close()
		return nil, fmt.Errorf("starting a sandbox's init: %w", err)
	}
	pid := cmd.Process.Pid
	proc, err := pidwatch.Watch(pid, true)
	if err != nil {
		ours.Close()
		_ = cmd.Process.Kill()
		go func() { _ = cmd.Wait() }()
		return nil, fmt.Errorf("starting a sandbox's init: %w", err)
	}
	_ = cmd.Process.Release()
	return &Init{PID: pid, Process: proc, setup: ours, ids: ids}, nil
}

// Kill ends an init (and with it its sandbox's processes).
func (i *Init) Kill() {
	_ = syscall.Kill(i.PID, syscall.SIGKILL)
	i.setup.Close()
}

// Build sends the init its world to build, and returns once it is built
// and its control socket listens, or with the init's own account of what
// failed (the init then ends). An init in a user namespace builds it from
// mounts (IdmapMounts; Build closes them), any other from spec's paths.
func (i *Init) Build(ctx context.Context, spec Spec, mounts *Mounts) error {
	defer i.setup.Close()
	defer mounts.Close()
	if (i.ids != nil) != (mounts != nil) {
		return fmt.Errorf("building sandbox %s: a user namespace needs idmapped mounts, and only it", spec.ID)
	}
	if err := os.MkdirAll(spec.Dir+"/root", 0o700); err != nil {
		return fmt.Errorf("building sandbox %s: %w", spec.ID, err)
	}
	// The control socket is bound here, root's alone, and listened on by
	// the init (whose pid its peers then see): an init that is root of
	// its user namespace only may not write in the runtime directory.
	control, err := bindControl(Control(spec.Dir))
	if err != nil {
		return fmt.Errorf("building sandbox %s: %w", spec.ID, err)
	}
	defer control.Close()
	files := []*os.File{control}
	if mounts != nil {
		spec.UserNS = true
		spec.Lowers = len(mounts.Lowers)
		spec.CacheFD = mounts.Cache != nil
		files = append(files, mounts.Files()...)
	}
	if spec.Boot {
		if mounts == nil || spec.Payload == nil {
			return fmt.Errorf("building sandbox %s: a booted sandbox needs a user namespace and its payload cgroup", spec.ID)
		}
		files = append(files, spec.Payload)
	}
	conn, err := net.FileConn(i.setup)
	if err != nil {
		return fmt.Errorf("building sandbox %s: %w", spec.ID, err)
	}
	defer conn.Close()
	uc := conn.(*net.UnixConn)
	if dl, ok := ctx.Deadline(); ok {
		_ = uc.SetDeadline(dl)
	} else {
		_ = uc.SetDeadline(time.Now().Add(30 * time.Second))
	}
	stop := context.AfterFunc(ctx, func() { _ = uc.SetDeadline(time.Now()) })
	defer stop()
	b, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	var oob []byte
	if len(files) > 0 {
		fds := make([]int, len(files))
		for k, f := range files {
			fds[k] = int(f.Fd())
		}
		oob = unix.UnixRights(fds...)
	}
	if _, _, err := uc.WriteMsgUnix(b, oob, nil); err != nil {
		return fmt.Errorf("sending sandbox %s's spec to its init: %w", spec.ID, err)
	}
	answer, err := io.ReadAll(uc)
	if err != nil {
		return fmt.Errorf("waiting for sandbox %s's init: %w", spec.ID, err)
	}
	if a := strings.TrimSpace(string(answer)); a != "ok" {
		if a == "" {
			a = "it ended without a word"
		}
		return fmt.Errorf("building sandbox %s: %s", spec.ID, a)
	}
	return nil
}

// bindControl binds the unix socket at path (SOCK_SEQPACKET), for root
// only; the init listens on it.
func bindControl(path string) (*os.File, error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("making the control socket: %w", err)
	}
	f := os.NewFile(uintptr(fd), path)
	_ = os.Remove(path)
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: path}); err != nil {
		f.Close()
		return nil, fmt.Errorf("binding the control socket %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		f.Close()
		return nil, fmt.Errorf("binding the control socket %s: %w", path, err)
	}
	return f, nil
}

// Start is Launch and Build: it returns the pid of an init whose world is
// built. On failure the init is killed.
func Start(ctx context.Context, argv []string, spec Spec) (int, error) {
	i, err := Launch(argv, spec.Network, nil)
	if err != nil {
		return 0, err
	}
	if err := i.Build(ctx, spec, nil); err != nil {
		i.Kill()
		return i.PID, err
	}
	return i.PID, nil
}
