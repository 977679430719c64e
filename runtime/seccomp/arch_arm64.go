package seccomp

import "golang.org/x/sys/unix"

// nativeArch is the audit architecture of this process's system calls.
const nativeArch = unix.AUDIT_ARCH_AARCH64

// x32Bit is zero: arm64 has no second ABI sharing its audit architecture.
const x32Bit = 0

// archDenied lists the denied calls that exist only on some architectures.
var archDenied = []syscallName{
	{"kexec_file_load", unix.SYS_KEXEC_FILE_LOAD},
}
