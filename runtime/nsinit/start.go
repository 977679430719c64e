package nsinit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Init is a sandbox's init that Launch started and Build has not yet
// (or has) given its world.
type Init struct {
	// PID is the init's pid, in the caller's PID namespace.
	PID   int
	setup *os.File
}

// Launch starts argv (a program whose main calls Main when IsInit) as the
// init of a new sandbox: in new mount, PID, UTS, IPC and (unless network
// is the host's) network namespaces, in its own session so that it
// outlives the daemon. The init waits for Build; meanwhile the caller can
// make the sandbox's volumes and move the pid into its scope. The caller
// reaps it when it ends.
func Launch(argv []string, network string) (*Init, error) {
	if len(argv) == 0 {
		return nil, errors.New("starting a sandbox's init: no command")
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("starting a sandbox's init: %w", err)
	}
	ours := os.NewFile(uintptr(fds[0]), "init-setup")
	theirs := os.NewFile(uintptr(fds[1]), "init-setup")
	flags := syscall.CLONE_NEWNS | syscall.CLONE_NEWPID | syscall.CLONE_NEWUTS | syscall.CLONE_NEWIPC
	if network != NetworkHost {
		flags |= syscall.CLONE_NEWNET
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), envInit+"=1")
	cmd.ExtraFiles = []*os.File{theirs} // fd 3
	cmd.Stderr = os.Stderr              // the init's own complaints reach the journal
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Cloneflags: uintptr(flags)}
	err = cmd.Start()
	theirs.Close()
	if err != nil {
		ours.Close()
		return nil, fmt.Errorf("starting a sandbox's init: %w", err)
	}
	pid := cmd.Process.Pid
	_ = cmd.Process.Release()
	return &Init{PID: pid, setup: ours}, nil
}

// Kill ends an init (and with it its sandbox's processes).
func (i *Init) Kill() {
	_ = syscall.Kill(i.PID, syscall.SIGKILL)
	i.setup.Close()
}

// Build sends the init its world to build, and returns once it is built
// and its control socket listens, or with the init's own account of what
// failed (the init then ends).
func (i *Init) Build(ctx context.Context, spec Spec) error {
	defer i.setup.Close()
	if err := os.MkdirAll(spec.Dir+"/root", 0o700); err != nil {
		return fmt.Errorf("building sandbox %s: %w", spec.ID, err)
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = i.setup.SetDeadline(dl)
	} else {
		_ = i.setup.SetDeadline(time.Now().Add(30 * time.Second))
	}
	stop := context.AfterFunc(ctx, func() { _ = i.setup.SetDeadline(time.Now()) })
	defer stop()
	if err := json.NewEncoder(i.setup).Encode(spec); err != nil {
		return fmt.Errorf("sending sandbox %s's spec to its init: %w", spec.ID, err)
	}
	answer, err := io.ReadAll(i.setup)
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

// Start is Launch and Build: it returns the pid of an init whose world is
// built. On failure the init is killed.
func Start(ctx context.Context, argv []string, spec Spec) (int, error) {
	i, err := Launch(argv, spec.Network)
	if err != nil {
		return 0, err
	}
	if err := i.Build(ctx, spec); err != nil {
		i.Kill()
		return i.PID, err
	}
	return i.PID, nil
}
