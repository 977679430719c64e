// Package seccomp builds and installs the seccomp filter that a sandbox's
// init process puts on itself before it starts any command.
//
// The init runs as root, pid 1 of the sandbox's pid namespace. It sets up
// the sandbox's mounts, calls [Install], and only then forks the commands,
// which run as the calling user with no new privileges. A seccomp filter is
// inherited across fork and execve and cannot be removed, so every process in
// the sandbox carries it. [Install] sets PR_SET_NO_NEW_PRIVS (which an
// unprivileged filter requires and the init wants anyway) and installs the
// filter with SECCOMP_FILTER_FLAG_TSYNC, so that every thread of the Go
// process gets it: the Go runtime forks from whichever thread it happens to
// run on.
//
// # What it denies, and why
//
// Dropping to an unprivileged user closes most of the kernel to the
// sandbox. What remains are surfaces that need no capability at all, and ways
// to gain capabilities again. The filter closes them:
//
//   - Creating a user namespace: clone or unshare with CLONE_NEWUSER fails
//     with EPERM. Inside a new user namespace the caller holds every
//     capability, so `unshare -r` followed by `mount` would succeed, and
//     every namespaced-capability code path in the kernel would be reachable.
//     clone3 passes its flags in memory, which a BPF filter cannot read, so
//     clone3 fails with ENOSYS instead: the C library and the Go runtime then
//     fall back to clone, whose flags the filter does inspect.
//   - The mount API (mount, umount2, pivot_root, move_mount, open_tree,
//     open_tree_attr, fsopen, fsmount, fsconfig, fspick, mount_setattr) and
//     setns: the sandbox's file system view and namespaces are fixed by the
//     init.
//   - Kernel keyrings (keyctl, add_key, request_key): not namespaced, shared
//     with the host user.
//   - bpf, perf_event_open, userfaultfd: large attack surfaces, some of them
//     reachable without privileges depending on sysctls; userfaultfd is a
//     classic tool for widening kernel race windows.
//   - Operations that need capabilities the sandbox never legitimately holds:
//     kexec_load, kexec_file_load, init_module, finit_module, delete_module,
//     open_by_handle_at, swapon, swapoff, reboot, acct, quotactl, quotactl_fd,
//     lookup_dcookie, nfsservctl, name_to_handle_at, fanotify_init, syslog,
//     clock_adjtime, clock_settime, settimeofday, and on amd64 iopl, ioperm,
//     uselib, ustat, _sysctl and sysfs. Denying them outright keeps them
//     closed even if a capability leaks in.
//   - io_uring (io_uring_setup, _enter, _register): its operations bypass
//     seccomp, and it has been a steady source of kernel exploits.
//   - kcmp, pidfd_getfd, process_vm_readv and process_vm_writev: reaching
//     into other processes beyond ptrace's own checks.
//   - By their arguments (see argRules): socket and socketpair for any
//     family but AF_UNIX, AF_INET, AF_INET6 and AF_NETLINK, and for
//     netlink any protocol but NETLINK_ROUTE and NETLINK_SOCK_DIAG (what
//     ip and ss use): AF_VSOCK reaches the hypervisor, AF_PACKET raw
//     frames, AF_ALG the kernel's crypto code; these fail with
//     EAFNOSUPPORT or EPROTONOSUPPORT, which programs take as "not here".
//     personality with any persona but those moby's default profile allows
//     (READ_IMPLIES_EXEC is refused). ioctl with TIOCSTI or TIOCLINUX, and
//     every btrfs ioctl (type 0x94) but reflink copies and reads: a
//     subvolume or snapshot made inside the sandbox's copy of the project
//     would be outside its quota, and qgroup, quota, defragment, resize,
//     balance, send and receive calls reach the whole pool.
//
// Denied calls fail with EPERM (SECCOMP_RET_ERRNO), so programs see an
// ordinary permission error. System calls from a foreign architecture (such
// as i386 calls through int 0x80 on amd64) kill the process, because their
// numbers mean different calls and the filter does not list them. On amd64,
// x32 system calls (numbers with bit 0x40000000 set) fail with EPERM.
//
// # What it deliberately allows
//
//   - clone without CLONE_NEWUSER: fork, vfork, threads and the other
//     namespaces (a mount or pid namespace needs CAP_SYS_ADMIN, which the
//     commands do not have).
//   - ptrace, so that gdb and strace work inside the sandbox. The sandbox's
//     pid namespace hides every process outside it, and since Linux 4.8
//     seccomp runs after the tracer's syscall-entry stop, so a tracer cannot
//     rewrite a call past the filter.
//   - Everything else not listed above. The filter is a denylist: a system
//     call that a later kernel adds is allowed until it is listed here.
//     An allowlist (as moby's and systemd-nspawn's) would close those
//     too; the argument rules above are allowlists already, so socket
//     families, netlink protocols, personas and btrfs ioctls a later
//     kernel adds are refused.
//
// One consequence for the init itself: after [Install], starting a process
// with syscall.SysProcAttr.UseCgroupFD or CLONE_NEWTIME fails, because Go
// uses clone3 for those.
package seccomp
