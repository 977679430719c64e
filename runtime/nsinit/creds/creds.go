// Package creds gives one OS thread of the init (or of the daemon) a
// user's credentials: its uid, gid and groups, and the capabilities a
// command of that user has. The raw system calls here act on the calling
// thread only (the C library's, and Go's syscall.Setuid, act on all), so
// the init does for a caller what the caller may do, and nothing of the
// init's power leaks to it.
package creds

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Identity is whom a command runs as: the caller (or root, when root
// asked for it).
type Identity struct {
	UID, GID uint32
	Groups   []uint32
	NoCaps   bool // uid 0 without root's capabilities
}

// BecomeOnThisThread gives the calling OS thread alone id's credentials:
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
func BecomeOnThisThread(id Identity) error {
	if err := SetThreadIDs(id.UID, id.GID, id.Groups); err != nil {
		return err
	}
	if id.UID == 0 && id.NoCaps {
		// uid 0 gets every capability back at exec unless NOROOT is
		// set, and locked so that the command cannot unset it; the
		// bounding set goes too (this thread's was not the init's
		// lockdown's).
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
	if id.UID == 0 && !id.NoCaps {
		keep = keptCaps
	}
	return SetThreadCaps(keep)
}

// SetThreadIDs gives the calling thread alone uid, gid and groups.
func SetThreadIDs(uid, gid uint32, groups []uint32) error {
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

// SetThreadCaps leaves the calling thread caps, effective and permitted,
// and no other capability.
func SetThreadCaps(caps []uintptr) error {
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

// AsCaller runs fn on a new OS thread that has id's credentials, and
// returns once fn has; the thread ends with it.
func AsCaller(id Identity, fn func()) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: see BecomeOnThisThread
		if err := BecomeOnThisThread(id); err != nil {
			done <- err
			return
		}
		fn()
		done <- nil
	}()
	return <-done
}

// lastCap is the running kernel's highest capability, read once: a
// command of uid 0 without capabilities drops each of them, and read it
// anew for each (42 reads of /proc per command).
var lastCap = sync.OnceValue(func() int {
	if b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap"); err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			return n
		}
	}
	return unix.CAP_LAST_CAP
})

// keptCaps are what a command started as root keeps: enough to manage
// files and processes inside the sandbox, nothing that reaches the kernel
// or the host (no CAP_SYS_ADMIN, _MODULE, _RAWIO, _PTRACE, _NET_ADMIN,
// _MKNOD, _DAC_READ_SEARCH).
var keptCaps = []uintptr{
	unix.CAP_CHOWN, unix.CAP_DAC_OVERRIDE, unix.CAP_FOWNER, unix.CAP_FSETID, unix.CAP_KILL,
	unix.CAP_SETGID, unix.CAP_SETUID, unix.CAP_NET_BIND_SERVICE, unix.CAP_SYS_CHROOT,
}

// DropCapabilities shrinks the calling thread's bounding set to keptCaps
// and clears its ambient set: the first half of the init's lockdown (the
// seccomp filter is the other).
func DropCapabilities() error {
	last := lastCap()
	keep := map[uintptr]bool{}
	for _, c := range keptCaps {
		keep[c] = true
	}
	for c := uintptr(0); c <= uintptr(last); c++ {
		if keep[c] {
			continue
		}
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, c, 0, 0, 0); err != nil {
			return fmt.Errorf("dropping capability %d from the bounding set: %w", c, err)
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("clearing ambient capabilities: %w", err)
	}
	return nil
}
