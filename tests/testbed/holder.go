package testbed

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// HideHolder makes the calling process a holder of dir that no
// /proc/PID shows, and never returns; a test binary calls it from a
// package's init (on the main thread, locked to it), re-executed by its
// test. "exited-leader": the process works in dir and holds dir/file
// open, then its main thread exits alone (exit(2), not exit_group), so
// /proc/PID/cwd, fd and maps show nothing while its other threads still
// use them. "thread-cwd": one thread, its working directory its own
// (unshare CLONE_FS), works in dir; /proc/PID/cwd is the main thread's.
// Neither needs any privilege. It makes the file ready once it holds dir.
func HideHolder(mode, dir, file, ready string) {
	fail := func(err error) { fmt.Fprintln(os.Stderr, "hidden holder:", err); os.Exit(2) }
	switch mode {
	case "exited-leader":
		if err := os.Chdir(dir); err != nil {
			fail(err)
		}
		f, err := os.Open(file)
		if err != nil {
			fail(err)
		}
		go func() {
			for {
				time.Sleep(time.Hour)
				runtime.KeepAlive(f)
			}
		}()
		if err := os.WriteFile(ready, nil, 0o644); err != nil {
			fail(err)
		}
		unix.RawSyscall(unix.SYS_EXIT, 0, 0, 0)
	case "thread-cwd":
		errs := make(chan error)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread, and its fs, die with its goroutine
			if err := unix.Unshare(unix.CLONE_FS); err != nil {
				errs <- err
				return
			}
			errs <- unix.Chdir(dir)
			select {}
		}()
		if err := <-errs; err != nil {
			fail(err)
		}
		if err := os.WriteFile(ready, nil, 0o644); err != nil {
			fail(err)
		}
		for {
			time.Sleep(time.Hour)
		}
	}
	fail(fmt.Errorf("no mode %q", mode))
}

// hiddenHolderEnv carries a hidden holder's MODE:DIR:READY into a test
// binary re-executed as one (HiddenHolderEnv makes it; HiddenHolderAsked
// reads it back in the binary's init).
const hiddenHolderEnv = "SANDBOXD_TEST_HIDDEN_HOLDER"

// HiddenHolderEnv is the environment entry that makes a re-executed test
// binary a hidden holder of dir in mode, making ready once it holds it.
func HiddenHolderEnv(mode, dir, ready string) string {
	return hiddenHolderEnv + "=" + mode + ":" + dir + ":" + ready
}

// HiddenHolderAsked says whether this process was started as a hidden
// holder (HiddenHolderEnv), and of what.
func HiddenHolderAsked() (mode, dir, ready string, ok bool) {
	v := os.Getenv(hiddenHolderEnv)
	if v == "" {
		return "", "", "", false
	}
	mode, rest, _ := strings.Cut(v, ":")
	dir, ready, _ = strings.Cut(rest, ":")
	return mode, dir, ready, true
}
