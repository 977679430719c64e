package seccomp

import "golang.org/x/sys/unix"

// nativeArch is the audit architecture of this process's system calls.
const nativeArch = unix.AUDIT_ARCH_X86_64

// x32Bit marks x32 system calls (__X32_SYSCALL_BIT). They report the
// x86_64 audit architecture, so the filter must reject them by number.
const x32Bit = 0x40000000

// archDenied lists the denied calls that exist only on some architectures.
var archDenied = []syscallName{
	{"kexec_file_load", unix.SYS_KEXEC_FILE_LOAD},
	{"iopl", unix.SYS_IOPL},
	{"ioperm", unix.SYS_IOPERM},
	// Old interfaces that moby's default profile denies too.
	{"uselib", unix.SYS_USELIB},
	{"ustat", unix.SYS_USTAT},
	{"_sysctl", unix.SYS__SYSCTL},
	{"sysfs", unix.SYS_SYSFS},
}
