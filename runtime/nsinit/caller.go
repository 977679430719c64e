package nsinit

import (
	"fmt"
	"runtime"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// identity is whom a command runs as: the caller (or root, when root
// asked for it).
type identity struct {
	uid, gid uint32
	groups   []uint32
	noCaps   bool // uid 0 without root's capabilities
}

func (r *Request) identity() identity {
	return identity{uid: r.UID, gid: r.GID, groups: r.Groups, noCaps: r.NoCapabilities}
}

// becomeOnThisThread gives the calling OS thread alone id's credentials:
// its uid, gid and groups, and the capabilities a command of id has
// (none; root's command keeps keptCaps). The init is root with every
// capability; what it does for a caller (find the program in PATH, write
// the caller's output to the caller's files) must be done with the
// caller's rights, or the caller borrows the init's (a write to
// /proc/PID/oom_score_adj of -1000, a directory only root may enter).
//
// The caller must have called runtime.LockOSThread and never unlock it:
// the goroutine ends locked, and the Go runtime then ends the thread
// rather than give others its credentials. The raw system calls act on
// this thread only (the C library's, and Go's syscall.Setuid, act on all).
func becomeOnThisThread(id identity) error {
	if err := setThreadIDs(id.uid, id.gid, id.groups); err != nil {
		return err
	}
	if id.uid == 0 && id.noCaps {
		// uid 0 gets every capability back at exec unless NOROOT is
		// set, and locked so that the command cannot unset it; the
		// bounding set goes too (this thread's was not lockdown's).
		if err := unix.Prctl(unix.PR_SET_SECUREBITS, secbitsNoRoot, 0, 0, 0); err != nil {
			return fmt.Errorf("setting uid 0's secure bits (no capabilities at exec): %w", err)
		}
		for c := uintptr(0); c <= uintptr(lastCap()); c++ {
			if err := unix.Prctl(unix.PR_CAPBSET_DROP, c, 0, 0, 0); err != nil {
				return fmt.Errorf("dropping capability %d from the bounding set: %w", c, err)
			}
		}
	}
	// From root to another uid the kernel clears the capabilities; root
	// keeps them, and gets what a root command gets.
	var keep []uintptr
	if id.uid == 0 && !id.noCaps {
		keep = keptCaps
	}
	return setThreadCaps(keep)
}

// setThreadIDs gives the calling thread alone uid, gid and groups.
func setThreadIDs(uid, gid uint32, groups []uint32) error {
	groups = append([]uint32(nil), groups...)
	var p unsafe.Pointer
	if len(groups) > 0 {
		p = unsafe.Pointer(&groups[0])
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, uintptr(len(groups)), uintptr(p), 0); e != 0 {
		return fmt.Errorf("taking groups %v: %w", groups, e)
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, uintptr(gid), uintptr(gid), uintptr(gid)); e != 0 {
		return fmt.Errorf("taking gid %d: %w", gid, e)
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, uintptr(uid), uintptr(uid), uintptr(uid)); e != 0 {
		return fmt.Errorf("taking uid %d: %w", uid, e)
	}
	return nil
}

// setThreadCaps leaves the calling thread caps, effective and permitted,
// and no other capability.
func setThreadCaps(caps []uintptr) error {
	var keep uint64
	for _, c := range caps {
		keep |= 1 << c
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	data := [2]unix.CapUserData{
		{Effective: uint32(keep), Permitted: uint32(keep)},
		{Effective: uint32(keep >> 32), Permitted: uint32(keep >> 32)},
	}
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("setting the thread's capabilities: %w", err)
	}
	return nil
}

// secbitsNoRoot: uid 0 gains nothing at exec, and ambient capabilities
// cannot be raised, both locked (linux/securebits.h; x/sys lacks them).
const secbitsNoRoot = 1<<0 | 1<<1 | 1<<6 | 1<<7

// forkersAsCaller are the threads that fork the commands of uid 0 with no
// capability, one a distinct identity (root's gid and groups), each made
// once and kept: a plain command of uid 0 must start with no capability,
// which the forker thread, root with keptCaps, cannot give, and a thread
// made for each command costs milliseconds.
type forkersAsCaller struct {
	mu sync.Mutex
	by map[string]chan fork
	// setup wraps what a new thread does (see server.threadSetup).
	setup func(joined bool, become func() error) func() error
}

// fork forks f on the thread of id (joined: in a booted sandbox's
// systemd's namespaces), which it starts the first time.
func (fs *forkersAsCaller) fork(id identity, joined bool, f fork) forked {
	key := fmt.Sprint(id, joined)
	fs.mu.Lock()
	forks, ok := fs.by[key]
	if !ok {
		forks = make(chan fork)
		setup := func() error { return becomeOnThisThread(id) }
		if fs.setup != nil {
			setup = fs.setup(joined, setup)
		}
		if err := forkerThread(setup, forks); err != nil {
			fs.mu.Unlock()
			return forked{-1, err}
		}
		if fs.by == nil {
			fs.by = map[string]chan fork{}
		}
		fs.by[key] = forks
	}
	fs.mu.Unlock()
	forks <- f
	return <-f.done
}

// asCaller runs fn on a new OS thread that has id's credentials, and
// returns once fn has; the thread ends with it.
func asCaller(id identity, fn func()) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: see becomeOnThisThread
		if err := becomeOnThisThread(id); err != nil {
			done <- err
			return
		}
		fn()
		done <- nil
	}()
	return <-done
}
