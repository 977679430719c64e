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

// Start starts argv (a program whose main calls Main when IsInit) as the
// init of a new sandbox: in new mount, PID, UTS, IPC and (unless the
// network is the host's) network namespaces, in its own session so that it
// outlives the daemon. It returns the init's pid once the sandbox's world
// is built and its control socket listens, or the init's own account of
// what failed. The caller moves the pid into the sandbox's scope and reaps
// it when it ends.
func Start(ctx context.Context, argv []string, spec Spec) (pid int, err error) {
	if len(argv) == 0 {
		return 0, errors.New("starting a sandbox's init: no command")
	}
	if err := os.MkdirAll(spec.Dir+"/root", 0o700); err != nil {
		return 0, fmt.Errorf("starting the init of sandbox %s: %w", spec.ID, err)
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, fmt.Errorf("starting the init of sandbox %s: %w", spec.ID, err)
	}
	ours := os.NewFile(uintptr(fds[0]), "init-setup")
	theirs := os.NewFile(uintptr(fds[1]), "init-setup")
	defer ours.Close()

	flags := syscall.CLONE_NEWNS | syscall.CLONE_NEWPID | syscall.CLONE_NEWUTS | syscall.CLONE_NEWIPC
	if spec.Network != NetworkHost {
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
		return 0, fmt.Errorf("starting the init of sandbox %s: %w", spec.ID, err)
	}
	pid = cmd.Process.Pid
	_ = cmd.Process.Release()
	defer func() {
		if err != nil {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}()

	if dl, ok := ctx.Deadline(); ok {
		_ = ours.SetDeadline(dl)
	} else {
		_ = ours.SetDeadline(time.Now().Add(30 * time.Second))
	}
	stop := context.AfterFunc(ctx, func() { _ = ours.SetDeadline(time.Now()) })
	defer stop()
	if err := json.NewEncoder(ours).Encode(spec); err != nil {
		return pid, fmt.Errorf("sending sandbox %s's spec to its init: %w", spec.ID, err)
	}
	answer, err := io.ReadAll(ours)
	if err != nil {
		return pid, fmt.Errorf("waiting for sandbox %s's init: %w", spec.ID, err)
	}
	if a := strings.TrimSpace(string(answer)); a != "ok" {
		if a == "" {
			a = "it ended without a word"
		}
		return pid, fmt.Errorf("building sandbox %s: %s", spec.ID, a)
	}
	return pid, nil
}
