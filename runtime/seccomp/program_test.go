package seccomp

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// seccompData is struct seccomp_data, the input of a filter.
type seccompData struct {
	nr   uint32
	arch uint32
	args [6]uint64
}

// bytes encodes d as the kernel lays it out on a little-endian machine.
func (d seccompData) bytes() []byte {
	b := make([]byte, 64)
	binary.LittleEndian.PutUint32(b[0:], d.nr)
	binary.LittleEndian.PutUint32(b[4:], d.arch)
	for i, a := range d.args {
		binary.LittleEndian.PutUint64(b[16+8*i:], a)
	}
	return b
}

// validate checks p the way the kernel's checker would for the
// instructions program uses: known opcodes, aligned in-bounds loads, jumps
// that land inside the program, and a return at the end.
func validate(p []unix.SockFilter) error {
	if len(p) == 0 || len(p) > unix.BPF_MAXINSNS {
		return fmt.Errorf("length %d", len(p))
	}
	for pc, in := range p {
		switch in.Code {
		case ldAbs:
			if in.K%4 != 0 || in.K+4 > 64 {
				return fmt.Errorf("pc %d: load at offset %d", pc, in.K)
			}
		case jeq, jset:
			if pc+1+int(in.Jt) >= len(p) || pc+1+int(in.Jf) >= len(p) {
				return fmt.Errorf("pc %d: jump %d/%d out of a program of %d", pc, in.Jt, in.Jf, len(p))
			}
		case ja:
			if pc+1+int(in.K) >= len(p) {
				return fmt.Errorf("pc %d: ja %d out of a program of %d", pc, in.K, len(p))
			}
		case ret, aluAnd:
		default:
			return fmt.Errorf("pc %d: unexpected opcode %#x", pc, in.Code)
		}
	}
	if p[len(p)-1].Code != ret {
		return fmt.Errorf("the program does not end with a return")
	}
	return nil
}

// run interprets p on d, for the instructions validate accepts.
func run(p []unix.SockFilter, d seccompData) uint32 {
	data := d.bytes()
	var a uint32
	for pc := 0; ; pc++ {
		in := p[pc]
		switch in.Code {
		case ldAbs:
			a = binary.LittleEndian.Uint32(data[in.K:])
		case aluAnd:
			a &= in.K
		case jeq:
			if a == in.K {
				pc += int(in.Jt)
			} else {
				pc += int(in.Jf)
			}
		case jset:
			if a&in.K != 0 {
				pc += int(in.Jt)
			} else {
				pc += int(in.Jf)
			}
		case ja:
			pc += int(in.K)
		case ret:
			return in.K
		}
	}
}

func action(r uint32) string {
	switch {
	case r == retAllow:
		return "ALLOW"
	case r == retKill:
		return "KILL_PROCESS"
	case r&unix.SECCOMP_RET_ACTION_FULL == unix.SECCOMP_RET_ERRNO:
		return "ERRNO " + unix.ErrnoName(unix.Errno(r&unix.SECCOMP_RET_DATA))
	}
	return fmt.Sprintf("%#x", r)
}

// TestProgramJumpsInRange builds filters for denied lists of many lengths,
// across the block size, and checks that every jump stays in the program
// and that every listed call, and only those, is denied.
func TestProgramJumpsInRange(t *testing.T) {
	const arch = 0xc0001234
	for _, x32 := range []uint32{0, 0x40000000} {
		for _, n := range []int{0, 1, 2, 254, 255, 256, 257, 509, 510, 511, 1000, 3000} {
			t.Run(fmt.Sprintf("x32=%#x/n=%d", x32, n), func(t *testing.T) {
				nrs := make([]uint32, n)
				for i := range nrs {
					nrs[i] = 1000 + uint32(i)
				}
				p := program(arch, x32, nrs, false)
				if err := validate(p); err != nil {
					t.Fatal(err)
				}
				for _, nr := range nrs {
					if got := run(p, seccompData{nr: nr, arch: arch}); got != retEPERM {
						t.Fatalf("syscall %d: %s, want ERRNO EPERM", nr, action(got))
					}
				}
				for _, nr := range []uint32{0, 1, 999, 1000 + uint32(n), 1000 + uint32(n) + 300} {
					if got := run(p, seccompData{nr: nr, arch: arch}); got != retAllow {
						t.Fatalf("syscall %d: %s, want ALLOW", nr, action(got))
					}
				}
			})
		}
	}
}

type check struct {
	name string
	data seccompData
	want uint32
}

// TestProgramSemantics runs the filter this package installs on the
// calls it must deny, limit and allow.
func TestProgramSemantics(t *testing.T) {
	if nativeArch == 0 {
		t.Skipf("%s is not supported", runtime.GOARCH)
	}
	p := program(nativeArch, x32Bit, deniedNumbers(denied()), false)
	if err := validate(p); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d instructions for %d denied calls", len(p), len(denied()))
	call := func(nr uint32, args ...uint64) seccompData {
		d := seccompData{nr: nr, arch: nativeArch}
		copy(d.args[:], args)
		return d
	}
	const newUser = unix.CLONE_NEWUSER
	cases := []check{
		{"foreign arch getpid", seccompData{nr: unix.SYS_GETPID, arch: unix.AUDIT_ARCH_I386}, retKill},
		{"foreign arch zero", seccompData{nr: 0, arch: 0}, retKill},
		{"getpid", call(unix.SYS_GETPID), retAllow},
		{"read", call(unix.SYS_READ), retAllow},
		{"ptrace", call(unix.SYS_PTRACE, unix.PTRACE_ATTACH, 2), retAllow},
		{"clone3", call(unix.SYS_CLONE3), retENOSYS},
		{"clone3 even without flags", call(unix.SYS_CLONE3, 0, 0), retENOSYS},
		{"clone for fork", call(unix.SYS_CLONE, uint64(unix.SIGCHLD)), retAllow},
		{"clone for a thread", call(unix.SYS_CLONE, unix.CLONE_VM|unix.CLONE_FS|unix.CLONE_FILES|unix.CLONE_SIGHAND|unix.CLONE_THREAD|unix.CLONE_SYSVSEM), retAllow},
		{"clone new pid+mount ns", call(unix.SYS_CLONE, unix.CLONE_NEWPID|unix.CLONE_NEWNS|uint64(unix.SIGCHLD)), retAllow},
		{"clone new user ns", call(unix.SYS_CLONE, newUser|uint64(unix.SIGCHLD)), retEPERM},
		{"clone new user ns, high word set", call(unix.SYS_CLONE, 0xffffffff_00000000|newUser), retEPERM},
		{"clone new user ns only in arg 1", call(unix.SYS_CLONE, uint64(unix.SIGCHLD), newUser), retAllow},
		{"clone all flags", call(unix.SYS_CLONE, 0xffffffff), retEPERM},
		{"unshare mount ns", call(unix.SYS_UNSHARE, unix.CLONE_NEWNS), retAllow},
		{"unshare user ns", call(unix.SYS_UNSHARE, newUser), retEPERM},
		{"unshare user+mount ns", call(unix.SYS_UNSHARE, newUser|unix.CLONE_NEWNS), retEPERM},
	}
	cases = append(cases, argCases(call)...)
	if x32Bit != 0 {
		cases = append(cases,
			check{"x32 getpid", call(x32Bit | 39), retEPERM},
			check{"x32 clone", call(x32Bit | unix.SYS_CLONE), retEPERM},
		)
	}
	for _, s := range denied() {
		cases = append(cases, check{s.name, call(s.nr), retEPERM})
	}
	for _, c := range cases {
		if got := run(p, c.data); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, action(got), action(c.want))
		}
	}
}

func TestDeniedList(t *testing.T) {
	want := []string{
		"mount", "umount2", "pivot_root", "move_mount", "open_tree", "fsopen",
		"fsmount", "fsconfig", "fspick", "setns", "keyctl", "add_key",
		"request_key", "bpf", "perf_event_open", "userfaultfd", "kexec_load",
		"kexec_file_load", "init_module", "finit_module", "delete_module",
		"open_by_handle_at", "swapon", "swapoff", "reboot", "acct", "quotactl",
		"lookup_dcookie", "nfsservctl", "io_uring_setup", "io_uring_enter",
		"io_uring_register", "kcmp", "pidfd_getfd", "process_vm_readv",
		"process_vm_writev", "name_to_handle_at",
	}
	if runtime.GOARCH == "amd64" {
		want = append(want, "iopl", "ioperm", "uselib", "ustat")
	}
	names := map[string]bool{}
	nrs := map[uint32]string{}
	for _, s := range denied() {
		if names[s.name] {
			t.Errorf("%s listed twice", s.name)
		}
		names[s.name] = true
		if other, ok := nrs[s.nr]; ok {
			t.Errorf("%s and %s share number %d", s.name, other, s.nr)
		}
		nrs[s.nr] = s.name
		switch s.nr {
		case unix.SYS_CLONE, unix.SYS_CLONE3, unix.SYS_UNSHARE:
			t.Errorf("%s (%d) is filtered by its flags and must not be in the denied list", s.name, s.nr)
		}
		for _, r := range argRules() {
			if r.nr == s.nr {
				t.Errorf("%s (%d) is decided by its arguments and must not be in the denied list", s.name, s.nr)
			}
		}
	}
	for _, n := range want {
		if !names[n] {
			t.Errorf("%s is not denied", n)
		}
	}
}

func TestInstallUnsupportedArch(t *testing.T) {
	if nativeArch != 0 {
		t.Skipf("%s is supported", runtime.GOARCH)
	}
	if err := Install(); err == nil {
		t.Fatal("Install succeeded on an unsupported architecture")
	}
}

// argCases are the calls argRules decide, with what the filter answers.
func argCases(call func(nr uint32, args ...uint64) seccompData) []check {
	const high = 0xffffffff_00000000 // the kernel ignores the high word of an int
	return []check{
		{"socket unix", call(unix.SYS_SOCKET, unix.AF_UNIX, unix.SOCK_STREAM), retAllow},
		{"socket inet", call(unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_STREAM), retAllow},
		{"socket inet6", call(unix.SYS_SOCKET, unix.AF_INET6, unix.SOCK_DGRAM), retAllow},
		{"socket inet, high word set", call(unix.SYS_SOCKET, high|unix.AF_INET, unix.SOCK_STREAM), retAllow},
		{"socket netlink route", call(unix.SYS_SOCKET, unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_ROUTE), retAllow},
		{"socket netlink sock_diag", call(unix.SYS_SOCKET, unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_SOCK_DIAG), retAllow},
		{"socket netlink audit", call(unix.SYS_SOCKET, unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_AUDIT), retEPROTONOSUPPORT},
		{"socket netlink uevent", call(unix.SYS_SOCKET, unix.AF_NETLINK, unix.SOCK_DGRAM, unix.NETLINK_KOBJECT_UEVENT), retEPROTONOSUPPORT},
		{"socket netlink generic", call(unix.SYS_SOCKET, unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_GENERIC), retEPROTONOSUPPORT},
		{"socket vsock", call(unix.SYS_SOCKET, unix.AF_VSOCK, unix.SOCK_STREAM), retEAFNOSUPPORT},
		{"socket vsock, high word of unix", call(unix.SYS_SOCKET, 1<<32|unix.AF_VSOCK, unix.SOCK_STREAM), retEAFNOSUPPORT},
		{"socket packet", call(unix.SYS_SOCKET, unix.AF_PACKET, unix.SOCK_RAW), retEAFNOSUPPORT},
		{"socket alg", call(unix.SYS_SOCKET, unix.AF_ALG, unix.SOCK_SEQPACKET), retEAFNOSUPPORT},
		{"socket a family not yet made", call(unix.SYS_SOCKET, 200, unix.SOCK_STREAM), retEAFNOSUPPORT},
		{"socketpair unix", call(unix.SYS_SOCKETPAIR, unix.AF_UNIX, unix.SOCK_STREAM), retAllow},
		{"socketpair vsock", call(unix.SYS_SOCKETPAIR, unix.AF_VSOCK, unix.SOCK_STREAM), retEAFNOSUPPORT},
		{"personality query", call(unix.SYS_PERSONALITY, 0xffffffff), retAllow},
		{"personality linux", call(unix.SYS_PERSONALITY, 0), retAllow},
		{"personality linux32", call(unix.SYS_PERSONALITY, 8), retAllow},
		{"personality uname26", call(unix.SYS_PERSONALITY, 0x20008), retAllow},
		{"personality read_implies_exec", call(unix.SYS_PERSONALITY, 0x0400000), retEPERM},
		{"personality addr_no_randomize", call(unix.SYS_PERSONALITY, 0x0040000), retEPERM},
		{"ioctl TCGETS", call(unix.SYS_IOCTL, 0, unix.TCGETS), retAllow},
		{"ioctl FIONREAD", call(unix.SYS_IOCTL, 0, unix.TIOCINQ), retAllow},
		{"ioctl TIOCSTI", call(unix.SYS_IOCTL, 0, unix.TIOCSTI), retEPERM},
		{"ioctl TIOCSTI, high word set", call(unix.SYS_IOCTL, 0, high|unix.TIOCSTI), retEPERM},
		{"ioctl FICLONE", call(unix.SYS_IOCTL, 3, unix.FICLONE), retAllow},
		{"ioctl FICLONERANGE", call(unix.SYS_IOCTL, 3, unix.FICLONERANGE), retAllow},
		{"ioctl BTRFS_IOC_GET_SUBVOL_INFO", call(unix.SYS_IOCTL, 3, 0x81f8943c), retAllow},
		{"ioctl BTRFS_IOC_SNAP_CREATE", call(unix.SYS_IOCTL, 3, 0x50009401), retEPERM},
		{"ioctl BTRFS_IOC_DEFRAG", call(unix.SYS_IOCTL, 3, 0x50009402), retEPERM},
		{"ioctl BTRFS_IOC_SNAP_DESTROY", call(unix.SYS_IOCTL, 3, 0x5000940f), retEPERM},
		{"ioctl BTRFS_IOC_SUBVOL_CREATE", call(unix.SYS_IOCTL, 3, 0x5000940e), retEPERM},
		{"ioctl BTRFS_IOC_SUBVOL_CREATE, high word set", call(unix.SYS_IOCTL, 3, high|0x5000940e), retEPERM},
		{"ioctl BTRFS_IOC_SNAP_CREATE_V2", call(unix.SYS_IOCTL, 3, 0x50009417), retEPERM},
		{"ioctl BTRFS_IOC_SUBVOL_CREATE_V2", call(unix.SYS_IOCTL, 3, 0x50009418), retEPERM},
		{"ioctl BTRFS_IOC_SNAP_DESTROY_V2", call(unix.SYS_IOCTL, 3, 0x5000943f), retEPERM},
		{"ioctl BTRFS_IOC_QUOTA_CTL", call(unix.SYS_IOCTL, 3, 0xc0109428), retEPERM},
		{"ioctl BTRFS_IOC_QGROUP_LIMIT", call(unix.SYS_IOCTL, 3, 0x8030942b), retEPERM},
		{"ioctl BTRFS_IOC_QGROUP_CREATE", call(unix.SYS_IOCTL, 3, 0x4010942a), retEPERM},
		{"ioctl BTRFS_IOC_QGROUP_ASSIGN", call(unix.SYS_IOCTL, 3, 0x40189429), retEPERM},
		{"ioctl BTRFS_IOC_SUBVOL_SETFLAGS", call(unix.SYS_IOCTL, 3, 0x4008941a), retEPERM},
		{"ioctl BTRFS_IOC_DEFRAG_RANGE", call(unix.SYS_IOCTL, 3, 0x40309410), retEPERM},
		{"ioctl BTRFS_IOC_SET_RECEIVED_SUBVOL", call(unix.SYS_IOCTL, 3, 0xc0c89425), retEPERM},
	}
}
