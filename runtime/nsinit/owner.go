package nsinit

import (
	"fmt"
	"os/exec"
	"runtime"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/runtime/nsinit/creds"
)

// The kernel charges what is made inside a user namespace (namespaces,
// inotify instances) at each level above it to the uid that made the
// namespace: one the daemon made as root would charge every sandbox's to
// host root's own allowance (a sandbox that made 128 inotify instances
// would leave root none). An init's namespace is made, instead, by a
// thread of the daemon that has the sandbox's root's host uid for the
// clone, keeping the capabilities to write any id map and to make a user
// namespace: each sandbox's count is its own uid's.

// ownerCaps are what the launching thread keeps as the owner's uid: to
// write the child's uid and gid maps, and to make a user namespace where
// the host restricts that to the privileged (Debian's
// kernel.unprivileged_userns_clone).
var ownerCaps = []uintptr{unix.CAP_SETUID, unix.CAP_SETGID, unix.CAP_SYS_ADMIN}

// ownerLaunches makes the launches one at a time: whether the process
// is dumpable is the process's, not a thread's, and any thread's change
// of uid clears it. A child of one owner thread exec'ing /proc/self/exe
// in the moment another thread had cleared it was refused (EACCES, with
// 8 creates at once).
var ownerLaunches sync.Mutex

// startOwnedBy starts cmd (with CLONE_NEWUSER) from a thread whose uid
// and gid are uid and gid, so that they own its user namespace. The
// thread ends with the call: its credentials are no one else's.
func startOwnedBy(cmd *exec.Cmd, uid, gid uint32) error {
	// Held until the child has exec'd (Start waits for that), not while
	// the thread ends: its end changes no one's credentials.
	ownerLaunches.Lock()
	defer ownerLaunches.Unlock()
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with it
		if err := becomeOwner(uid, gid); err != nil {
			done <- err
			return
		}
		done <- cmd.Start()
	}()
	return <-done
}

// becomeOwner gives the calling thread alone uid and gid, with ownerCaps
// effective. Raw system calls: the C library's and Go's setuid act on
// every thread.
func becomeOwner(uid, gid uint32) error {
	if err := unix.Prctl(unix.PR_SET_KEEPCAPS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("keeping capabilities: %w", err)
	}
	if err := creds.SetThreadIDs(uid, gid, nil); err != nil {
		return err
	}
	// A change of uid makes the process undumpable (its /proc entries
	// root's), and the child, which shares its memory until it execs,
	// could then not exec /proc/self/exe. The daemon is root's either way.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("keeping the process dumpable: %w", err)
	}
	return creds.SetThreadCaps(ownerCaps)
}
