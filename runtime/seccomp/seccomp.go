package seccomp

import (
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// syscallName is a denied system call: its name, for documentation and
// tests, and its number on this architecture.
type syscallName struct {
	name string
	nr   uint32
}

// commonDenied lists the system calls that always fail with EPERM and that
// golang.org/x/sys/unix defines on every Linux architecture. The calls that
// exist only on some architectures are in archDenied, in the arch_*.go files.
var commonDenied = []syscallName{
	// The mount API: the init has fixed the sandbox's file system view.
	{"mount", unix.SYS_MOUNT},
	{"umount2", unix.SYS_UMOUNT2},
	{"pivot_root", unix.SYS_PIVOT_ROOT},
	{"move_mount", unix.SYS_MOVE_MOUNT},
	{"open_tree", unix.SYS_OPEN_TREE},
	{"open_tree_attr", unix.SYS_OPEN_TREE_ATTR},
	{"fsopen", unix.SYS_FSOPEN},
	{"fsmount", unix.SYS_FSMOUNT},
	{"fsconfig", unix.SYS_FSCONFIG},
	{"fspick", unix.SYS_FSPICK},
	{"mount_setattr", unix.SYS_MOUNT_SETATTR},
	// Joining other namespaces.
	{"setns", unix.SYS_SETNS},
	// Kernel keyrings are not namespaced.
	{"keyctl", unix.SYS_KEYCTL},
	{"add_key", unix.SYS_ADD_KEY},
	{"request_key", unix.SYS_REQUEST_KEY},
	// Large kernel surfaces.
	{"bpf", unix.SYS_BPF},
	{"perf_event_open", unix.SYS_PERF_EVENT_OPEN},
	{"userfaultfd", unix.SYS_USERFAULTFD},
	// Host administration.
	{"kexec_load", unix.SYS_KEXEC_LOAD},
	{"init_module", unix.SYS_INIT_MODULE},
	{"finit_module", unix.SYS_FINIT_MODULE},
	{"delete_module", unix.SYS_DELETE_MODULE},
	{"open_by_handle_at", unix.SYS_OPEN_BY_HANDLE_AT},
	{"swapon", unix.SYS_SWAPON},
	{"swapoff", unix.SYS_SWAPOFF},
	{"reboot", unix.SYS_REBOOT},
	{"acct", unix.SYS_ACCT},
	{"quotactl", unix.SYS_QUOTACTL},
	{"quotactl_fd", unix.SYS_QUOTACTL_FD},
	{"lookup_dcookie", unix.SYS_LOOKUP_DCOOKIE},
	{"nfsservctl", unix.SYS_NFSSERVCTL},
	{"name_to_handle_at", unix.SYS_NAME_TO_HANDLE_AT},
	{"fanotify_init", unix.SYS_FANOTIFY_INIT},
	{"syslog", unix.SYS_SYSLOG},
	{"clock_adjtime", unix.SYS_CLOCK_ADJTIME},
	{"clock_settime", unix.SYS_CLOCK_SETTIME},
	{"settimeofday", unix.SYS_SETTIMEOFDAY},
	// io_uring: a second way into most of the kernel's I/O paths, which
	// seccomp does not see (its operations are not system calls), and a
	// steady source of privilege escalations.
	{"io_uring_setup", unix.SYS_IO_URING_SETUP},
	{"io_uring_enter", unix.SYS_IO_URING_ENTER},
	{"io_uring_register", unix.SYS_IO_URING_REGISTER},
	// Reaching into other processes beyond what ptrace's checks show:
	// kcmp compares kernel objects (an oracle for kernel pointers),
	// pidfd_getfd steals a descriptor, process_vm_readv/writev read and
	// write another process's memory (gdb falls back to /proc/PID/mem).
	{"kcmp", unix.SYS_KCMP},
	{"pidfd_getfd", unix.SYS_PIDFD_GETFD},
	{"process_vm_readv", unix.SYS_PROCESS_VM_READV},
	{"process_vm_writev", unix.SYS_PROCESS_VM_WRITEV},
}

// denied returns every system call that the filter makes fail with EPERM
// on this architecture.
func denied() []syscallName {
	return append(append([]syscallName(nil), commonDenied...), archDenied...)
}

// deniedNumbers returns the numbers of the calls in list.
func deniedNumbers(list []syscallName) []uint32 {
	nrs := make([]uint32, len(list))
	for i, s := range list {
		nrs[i] = s.nr
	}
	return nrs
}

// Offsets in struct seccomp_data, the input of a seccomp filter.
const (
	offsetNr   = 0  // int nr
	offsetArch = 4  // __u32 arch
	offsetArgs = 16 // __u64 args[6]
	// offsetArg0Low is the low 32 bits of args[0]. Both supported
	// architectures are little-endian, so the low half comes first.
	offsetArg0Low = offsetArgs + 0
)

// maxBlock is the most compares that program puts before one shared
// RET_ERRNO: the first compare's jump over the others must fit in a uint8.
const maxBlock = 255

// Returned actions.
const (
	retAllow  = unix.SECCOMP_RET_ALLOW
	retKill   = unix.SECCOMP_RET_KILL_PROCESS
	retEPERM  = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
	retENOSYS = unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)
)

func stmt(code uint16, k uint32) unix.SockFilter {
	return unix.SockFilter{Code: code, K: k}
}

func jump(code uint16, k uint32, jt, jf uint8) unix.SockFilter {
	return unix.SockFilter{Code: code, Jt: jt, Jf: jf, K: k}
}

const (
	ldAbs = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
	jeq   = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
	jset  = unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K
	ja    = unix.BPF_JMP | unix.BPF_JA
	// aluAnd is A &= k.
	aluAnd = unix.BPF_ALU | unix.BPF_AND | unix.BPF_K
	ret    = unix.BPF_RET | unix.BPF_K
)

// program builds the filter for audit architecture arch. A non-zero x32
// is a bit that marks a second ABI sharing arch (amd64's x32); calls with
// it set fail with EPERM. The calls numbered in denied fail with EPERM,
// clone3 fails with ENOSYS, clone and unshare fail with EPERM when their
// first argument holds CLONE_NEWUSER, socket, socketpair, personality and
// ioctl are decided by their arguments (argRules), calls from another
// architecture kill the process, and everything else is allowed.
//
// The system call numbers of clone, clone3 and unshare are this
// architecture's; arch is a parameter so that tests can build a filter for
// a foreign one.
//
// allowNewUser lets clone and unshare make user namespaces (the boot
// filter's systemd gives services user namespaces of their own).
func program(arch, x32 uint32, denied []uint32, allowNewUser bool) []unix.SockFilter {
	p := []unix.SockFilter{
		stmt(ldAbs, offsetArch),
		jump(jeq, arch, 1, 0),
		stmt(ret, retKill),
		stmt(ldAbs, offsetNr),
	}
	if x32 != 0 {
		p = append(p,
			jump(jset, x32, 0, 1),
			stmt(ret, retEPERM),
		)
	}
	p = append(p,
		jump(jeq, unix.SYS_CLONE3, 0, 1),
		stmt(ret, retENOSYS),
	)
	if !allowNewUser {
		p = append(p, newUserRule()...)
	}
	p = append(p, argFilters()...)
	// The denied calls: blocks of up to maxBlock compares, each block
	// jumping on a match to its own RET_ERRNO right after it. Within a
	// block of k, compare i jumps over the k-1-i compares after it and the
	// one instruction that ends the block.
	if len(denied) == 0 {
		return append(p, stmt(ret, retAllow))
	}
	for start := 0; start < len(denied); start += maxBlock {
		block := denied[start:min(start+maxBlock, len(denied))]
		k := len(block)
		for i, nr := range block {
			p = append(p, jump(jeq, nr, uint8(k-i), 0))
		}
		if start+k == len(denied) {
			p = append(p, stmt(ret, retAllow))
		} else {
			p = append(p, stmt(ja, 1))
		}
		p = append(p, stmt(ret, retEPERM))
	}
	return p
}

// newUserRule makes clone and unshare fail with EPERM when their flags
// hold CLONE_NEWUSER. Both take their flags in args[0] on the supported
// architectures; CLONE_NEWUSER is in the low word.
func newUserRule() []unix.SockFilter {
	return []unix.SockFilter{
		jump(jeq, unix.SYS_CLONE, 1, 0),
		jump(jeq, unix.SYS_UNSHARE, 0, 4),
		stmt(ldAbs, offsetArg0Low),
		jump(jset, unix.CLONE_NEWUSER, 0, 1),
		stmt(ret, retEPERM),
		stmt(ret, retAllow),
	}
}

// Install sets PR_SET_NO_NEW_PRIVS and installs the sandbox's seccomp
// filter on every thread of the calling process. Every process forked
// afterwards inherits both. It fails on architectures other than amd64 and
// arm64.
func Install() error {
	return install(program(nativeArch, x32Bit, deniedNumbers(denied()), false), true, unix.SECCOMP_FILTER_FLAG_TSYNC)
}

// InstallThread is Install for the calling thread alone (which must be
// locked to its goroutine, for good): for a process whose other threads
// must keep calls the filter denies (an init that joins a booted
// sandbox's namespaces from each thread that forks commands).
func InstallThread() error {
	return install(program(nativeArch, x32Bit, deniedNumbers(denied()), false), true, 0)
}

// bootAllowed are the calls the boot filter lets through that the
// commands' filter denies: a sandbox's systemd mounts its API file
// systems and every service's namespace, and joins namespaces
// (JoinsNamespaceOf=); PrivateUsers= makes user namespaces.
var bootAllowed = map[string]bool{
	"mount": true, "umount2": true, "pivot_root": true, "move_mount": true, "open_tree": true,
	"open_tree_attr": true, "fsopen": true, "fsmount": true, "fsconfig": true, "fspick": true,
	"mount_setattr": true, "setns": true,
}

// InstallBoot installs the boot filter, for a sandbox's systemd, on the
// calling thread (locked, about to exec): the commands' filter but for
// bootAllowed and new user namespaces, without no_new_privs (services'
// setuid programs work as on the host). The caller must hold CAP_SYS_ADMIN
// in its user namespace: its systemd's namespace, nested in the
// sandbox's, where nothing of the host's is in reach but through the
// init's mounts, which the kernel locks.
func InstallBoot() error {
	var list []syscallName
	for _, s := range denied() {
		if !bootAllowed[s.name] {
			list = append(list, s)
		}
	}
	return install(program(nativeArch, x32Bit, deniedNumbers(list), true), false, 0)
}

// install installs prog on the calling thread (and, with TSYNC in flags,
// on every other), after no_new_privs if nnp.
func install(prog []unix.SockFilter, nnp bool, flags uintptr) error {
	if nativeArch == 0 {
		return fmt.Errorf("installing the seccomp filter: architecture %s is not supported", runtime.GOARCH)
	}
	if len(prog) > unix.BPF_MAXINSNS {
		return fmt.Errorf("installing the seccomp filter: the program has %d instructions, more than %d", len(prog), unix.BPF_MAXINSNS)
	}
	// no_new_privs is per thread until the TSYNC install copies it to the
	// others, so both calls must run on the same thread.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if nnp {
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			return fmt.Errorf("installing the seccomp filter: setting no_new_privs: %w", err)
		}
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	r, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, flags, uintptr(unsafe.Pointer(&fprog)))
	runtime.KeepAlive(prog)
	if errno != 0 {
		return fmt.Errorf("installing the seccomp filter: %w", errno)
	}
	if r != 0 {
		// With TSYNC, a positive result is the id of a thread that could
		// not be synchronized; the filter was not installed.
		return fmt.Errorf("installing the seccomp filter: thread %d could not be synchronized", r)
	}
	return nil
}
