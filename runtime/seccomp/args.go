package seccomp

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// Some system calls are allowed or denied by their arguments. Each rule
// below is a block of the filter that runs only for its call and ends in
// a return on every path. The kernel reads int and unsigned int arguments
// from the low 32 bits of their register, so a rule loads only those.

// Offsets of the low words of args[1] and args[2].
const (
	offsetArg1Low = offsetArgs + 8
	offsetArg2Low = offsetArgs + 16
)

// Returned actions for what the argument rules refuse: errors that
// programs take as "not supported here" and work around (libaudit, for
// one, carries on without an audit socket), rather than as a failure.
var (
	retEAFNOSUPPORT    = unix.SECCOMP_RET_ERRNO | uint32(unix.EAFNOSUPPORT)
	retEPROTONOSUPPORT = unix.SECCOMP_RET_ERRNO | uint32(unix.EPROTONOSUPPORT)
)

// allowedFamilies are the socket families a sandbox may open: local
// sockets, IPv4 and IPv6 (which its network namespace bounds), and
// netlink for allowedNetlink only. Every other family (AF_VSOCK, which
// reaches the hypervisor; AF_PACKET; AF_ALG, the kernel's crypto API;
// AF_KEY, AF_XDP, AF_BLUETOOTH, AF_CAN, AF_TIPC, AF_RDS, ...) fails with
// EAFNOSUPPORT, including families a later kernel adds.
var allowedFamilies = []uint32{unix.AF_UNIX, unix.AF_INET, unix.AF_INET6}

// allowedNetlink are the netlink protocols `ip` and `ss` need: routes,
// links and addresses (NETLINK_ROUTE), and socket listings
// (NETLINK_SOCK_DIAG). The others (audit, uevents, netfilter, generic
// netlink, ...) fail with EPROTONOSUPPORT.
var allowedNetlink = []uint32{unix.NETLINK_ROUTE, unix.NETLINK_SOCK_DIAG}

// allowedPersonas are personality(2)'s values that moby's default
// profile allows: PER_LINUX, PER_LINUX32, each with UNAME26, and
// 0xffffffff, which only reads the persona. The others, among them
// READ_IMPLIES_EXEC (every readable mapping executable) and
// ADDR_NO_RANDOMIZE (gdb warns and runs on), fail with EPERM.
var allowedPersonas = []uint32{0x0, 0x8, 0x20000, 0x20008, 0xffffffff}

// btrfsMagic is the type byte of btrfs's ioctls, and of the generic
// FICLONE family that began as btrfs's.
const btrfsMagic = 0x94

// allowedBtrfsIoctls are the ioctls of btrfsMagic's type that a sandbox
// may call: reflink copies (cp --reflink), and calls that only read.
// Every other one fails with EPERM: those that make and delete
// subvolumes and snapshots (a subvolume made inside the sandbox's copy of
// the project is outside its quota), change qgroups and quotas,
// defragment (which unshares extents a snapshot shares, growing the
// pool), resize, balance, scrub, send and receive, add or remove devices.
var allowedBtrfsIoctls = []uint32{
	unix.FICLONE,       // _IOW(0x94, 9, int)
	unix.FICLONERANGE,  // _IOW(0x94, 13, struct file_clone_range)
	unix.FIDEDUPERANGE, // _IOWR(0x94, 54, struct file_dedupe_range)
	0xc0189414,         // BTRFS_IOC_SPACE_INFO
	0x80089419,         // BTRFS_IOC_SUBVOL_GETFLAGS
	0x8400941f,         // BTRFS_IOC_FS_INFO
	0x80189439,         // BTRFS_IOC_GET_FEATURES
	0x81f8943c,         // BTRFS_IOC_GET_SUBVOL_INFO
	0xd000943d,         // BTRFS_IOC_GET_SUBVOL_ROOTREF
	0xd000943e,         // BTRFS_IOC_INO_LOOKUP_USER
}

// deniedIoctls fail with EPERM whatever their type: TIOCSTI pushes
// characters into a terminal's input (the caller's, when the sandbox was
// handed it), and TIOCLINUX reaches the virtual console.
var deniedIoctls = []uint32{unix.TIOCSTI, unix.TIOCLINUX}

// insn is an instruction whose jumps name labels ("" is the next
// instruction); assemble turns a block of them into a filter.
type insn struct {
	label  string
	code   uint16
	k      uint32
	jt, jf string
}

// assemble resolves b's labels into relative jumps. A block is small, so
// a jump that does not fit is a bug here, not a condition to report.
func assemble(b []insn) []unix.SockFilter {
	at := map[string]int{}
	for i, in := range b {
		if in.label != "" {
			at[in.label] = i
		}
	}
	offset := func(pc int, label string) uint8 {
		if label == "" {
			return 0
		}
		to, ok := at[label]
		if !ok || to <= pc || to-pc-1 > 255 {
			panic(fmt.Sprintf("seccomp: bad jump from %d to %q", pc, label))
		}
		return uint8(to - pc - 1)
	}
	out := make([]unix.SockFilter, len(b))
	for pc, in := range b {
		out[pc] = unix.SockFilter{Code: in.code, K: in.k, Jt: offset(pc, in.jt), Jf: offset(pc, in.jf)}
	}
	return out
}

// oneOf loads the word at off and jumps to yes if it is one of values;
// otherwise it goes on.
func oneOf(off uint32, values []uint32, yes string) []insn {
	b := []insn{{code: ldAbs, k: off}}
	for _, v := range values {
		b = append(b, insn{code: jeq, k: v, jt: yes})
	}
	return b
}

// socketRule is socket(2)'s and socketpair(2)'s block: the family is
// args[0], the protocol args[2].
func socketRule() []insn {
	b := oneOf(offsetArg0Low, allowedFamilies, "allow")
	b = append(b, insn{code: jeq, k: unix.AF_NETLINK, jf: "nofamily"})
	b = append(b, oneOf(offsetArg2Low, allowedNetlink, "allow")...)
	return append(b,
		insn{code: ret, k: retEPROTONOSUPPORT},
		insn{label: "allow", code: ret, k: retAllow},
		insn{label: "nofamily", code: ret, k: retEAFNOSUPPORT},
	)
}

// personalityRule is personality(2)'s block.
func personalityRule() []insn {
	return append(oneOf(offsetArg0Low, allowedPersonas, "allow"),
		insn{code: ret, k: retEPERM},
		insn{label: "allow", code: ret, k: retAllow},
	)
}

// ioctlRule is ioctl(2)'s block: the request is args[1].
func ioctlRule() []insn {
	b := oneOf(offsetArg1Low, deniedIoctls, "deny")
	b = append(b, oneOf(offsetArg1Low, allowedBtrfsIoctls, "allow")[1:]...)
	return append(b,
		insn{code: aluAnd, k: 0xff00},
		insn{code: jeq, k: btrfsMagic << 8, jt: "deny"},
		insn{label: "allow", code: ret, k: retAllow},
		insn{label: "deny", code: ret, k: retEPERM},
	)
}

// argRules are the calls decided by their arguments, and their blocks.
func argRules() []struct {
	nr    uint32
	block []insn
} {
	return []struct {
		nr    uint32
		block []insn
	}{
		{unix.SYS_SOCKET, socketRule()},
		{unix.SYS_SOCKETPAIR, socketRule()},
		{unix.SYS_PERSONALITY, personalityRule()},
		{unix.SYS_IOCTL, ioctlRule()},
	}
}

// argFilters is the part of the filter that applies argRules, for a
// program whose accumulator holds the system call's number: each rule's
// compare skips its block when the number is another's, and leaves the
// accumulator as it was for the next.
func argFilters() []unix.SockFilter {
	var p []unix.SockFilter
	for _, r := range argRules() {
		block := assemble(r.block)
		if len(block) > 255 {
			panic("seccomp: an argument rule's block is too long to jump over")
		}
		p = append(p, jump(jeq, r.nr, 0, uint8(len(block))))
		p = append(p, block...)
	}
	return p
}
