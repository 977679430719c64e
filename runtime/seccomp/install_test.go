package seccomp

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The real tests run in child processes: a copy of the test binary that
// TestFilter starts with helperEnv set, which runs TestHelperProcess. The
// child makes itself a private mount namespace, installs the filter if
// helperEnv is "filtered" (not if it is "baseline"), tries things, and
// prints one "key=result" line for each. The parent compares the results of
// the two runs.
const (
	helperEnv = "SANDBOXD_SECCOMP_TEST_HELPER"
	dirEnv    = "SANDBOXD_SECCOMP_TEST_DIR"
)

// probeArgs holds, for each denied call, arguments with which it fails
// harmlessly (a bad pointer, descriptor or flag) even without the filter,
// and as root: the child tries every denied call for real. acct gets a
// pointer to "" at run time instead, since acct(NULL) would turn process
// accounting off.
var probeArgs = map[string][6]uintptr{
	"mount":             {},
	"umount2":           {},
	"pivot_root":        {},
	"move_mount":        {neg1, 0, neg1, 0, 0},
	"open_tree":         {neg1, 0, 0},
	"open_tree_attr":    {neg1, 0, 0, 0, 0},
	"fsopen":            {},
	"fsmount":           {neg1, 0, 0},
	"fsconfig":          {neg1, 0xffff, 0, 0, 0},
	"fspick":            {neg1, 0, 0},
	"mount_setattr":     {neg1, 0, 0, 0, 0},
	"setns":             {neg1, 0},
	"keyctl":            {0xffff},
	"add_key":           {},
	"request_key":       {},
	"bpf":               {0xffff, 0, 0},
	"perf_event_open":   {0, 0, neg1, neg1, 0},
	"userfaultfd":       {0xffffffff},
	"kexec_load":        {0, 0, 0, 0xffffffff},
	"kexec_file_load":   {neg1, neg1, 0, 0, 0xffffffff},
	"init_module":       {},
	"finit_module":      {neg1, 0, 0},
	"delete_module":     {},
	"open_by_handle_at": {neg1, 0, 0},
	"swapon":            {},
	"swapoff":           {},
	"reboot":            {},
	"acct":              {},
	"quotactl":          {},
	"quotactl_fd":       {neg1, 0, 0, 0},
	"lookup_dcookie":    {},
	"nfsservctl":        {},
	"iopl":              {4},
	"ioperm":            {},
	"name_to_handle_at": {neg1, 0, 0, 0, 0},
	"fanotify_init":     {0xffffffff, 0xffffffff},
	"syslog":            {0xffff},
	"clock_adjtime":     {0xffff, 0},
	"clock_settime":     {0xffff, 0},
	"settimeofday":      {1, 1},
	"io_uring_setup":    {0, 0},
	"io_uring_enter":    {neg1, 0, 0, 0, 0, 0},
	"io_uring_register": {neg1, 0, 0, 0},
	"kcmp":              {0, 0, 0xffff, 0, 0},
	"pidfd_getfd":       {neg1, 0, 0},
	"process_vm_readv":  {0, 0, 0, 0, 0, 0},
	"process_vm_writev": {0, 0, 0, 0, 0, 0},
	"uselib":            {},
	"ustat":             {0, 0},
	"_sysctl":           {},
	"sysfs":             {0xffff},
}

const neg1 = ^uintptr(0)

func TestHelperProcess(t *testing.T) {
	mode := os.Getenv(helperEnv)
	if mode == "" {
		t.Skip("run by TestFilter in a child process")
	}
	if err := helper(mode == "filtered", os.Getenv(dirEnv)); err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		os.Exit(2)
	}
	os.Exit(0)
}

// result names the outcome of a call: "ok", an errno name, or a message.
func result(err error) string {
	if err == nil {
		return "ok"
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		if name := unix.ErrnoName(errno); name != "" {
			return name
		}
		return fmt.Sprintf("errno %d", int(errno))
	}
	return strings.ReplaceAll(err.Error(), "\n", " | ")
}

func errnoErr(e syscall.Errno) error {
	if e == 0 {
		return nil
	}
	return e
}

func helper(filtered bool, dir string) error {
	// The mount namespace below belongs to this thread only, and so do the
	// processes it forks: stay on it until the process exits.
	runtime.LockOSThread()
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("unsharing the mount namespace: %w", err)
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making / private: %w", err)
	}
	if filtered {
		if err := Install(); err != nil {
			return err
		}
	}
	report := func(key string, err error) { fmt.Printf("%s=%s\n", key, result(err)) }

	// Every thread, including those that existed before Install.
	report("threads_before", allThreads(filtered))

	// A user namespace, through clone and through unshare in a forked
	// child, and through util-linux's unshare as an unprivileged user.
	cmd := exec.Command("/bin/true")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER}
	report("exec_cloneflags_newuser", cmd.Run())
	cmd = exec.Command("/bin/true")
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWUSER}
	report("exec_unshareflags_newuser", cmd.Run())
	report("unshare_r_mount_as_nobody", unshareMountAsNobody())

	// Mounting, as root.
	err := unix.Mount("tmpfs", dir, "tmpfs", 0, "")
	report("mount", err)
	report("umount2", unix.Unmount(dir, 0))

	// clone3 with no arguments: EINVAL from the kernel, before it forks.
	_, _, e := unix.Syscall(unix.SYS_CLONE3, 0, 0, 0)
	report("clone3", errnoErr(e))

	// Every denied call, with arguments that make it fail anyway.
	empty, err := unix.BytePtrFromString("")
	if err != nil {
		return err
	}
	for _, s := range denied() {
		args, ok := probeArgs[s.name]
		if !ok {
			return fmt.Errorf("no probe arguments for %s", s.name)
		}
		if s.name == "acct" {
			args[0] = uintptr(unsafe.Pointer(empty))
		}
		_, _, e := unix.Syscall6(uintptr(s.nr), args[0], args[1], args[2], args[3], args[4], args[5])
		report("probe_"+s.name, errnoErr(e))
	}
	if x32Bit != 0 {
		_, _, e := unix.Syscall(x32Bit|unix.SYS_GETPID, 0, 0, 0)
		report("x32_getpid", errnoErr(e))
	}
	argProbes(report)

	// What must keep working.
	report("exec_true", exec.Command("/bin/true").Run())
	report("threads_new", newThreads(filtered, 32))
	report("read_file", readWrite(filepath.Join(dir, "file")))
	report("ptrace", traceChild())
	report("unshare_newns", unix.Unshare(unix.CLONE_NEWNS))

	// Last: without the filter this fails anyway, with EINVAL, since the
	// Go process has several threads.
	report("unshare_newuser", unix.Unshare(unix.CLONE_NEWUSER))
	return nil
}

// threadStatus checks the seccomp mode and no_new_privs of the thread whose
// status file is path.
func threadStatus(path string, filtered bool) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	mode, nnp := "0", "0"
	if filtered {
		mode, nnp = "2", "1"
	}
	for _, want := range []string{"Seccomp:\t" + mode + "\n", "NoNewPrivs:\t" + nnp + "\n"} {
		if !bytes.Contains(b, []byte(want)) {
			return fmt.Errorf("%s lacks %q", path, want)
		}
	}
	return nil
}

// allThreads checks every thread of the process.
func allThreads(filtered bool) error {
	paths, err := filepath.Glob("/proc/self/task/*/status")
	if err != nil {
		return err
	}
	if len(paths) < 2 {
		return fmt.Errorf("only %d threads", len(paths))
	}
	for _, p := range paths {
		if err := threadStatus(p, filtered); err != nil {
			return err
		}
	}
	return nil
}

// newThreads holds n goroutines on n threads at once, so that some of the
// threads are new, and checks each.
func newThreads(filtered bool, n int) error {
	errs := make(chan error, n)
	release := make(chan struct{})
	for range n {
		go func() {
			runtime.LockOSThread()
			err := threadStatus("/proc/thread-self/status", filtered)
			if err == nil {
				sum := 0
				for i := range 100000 {
					sum += i
				}
				if sum == 0 {
					err = errors.New("no work done")
				}
			}
			errs <- err
			<-release // keeps this thread from being reused meanwhile
		}()
	}
	var first error
	for range n {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	close(release)
	return first
}

func readWrite(path string) error {
	if err := os.WriteFile(path, []byte("hello"), 0o600); err != nil {
		return err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if string(b) != "hello" {
		return fmt.Errorf("read %q", b)
	}
	return nil
}

// traceChild starts /bin/true traced, as gdb and strace do, waits for the
// stop at its execve, detaches and waits for it to exit.
func traceChild() error {
	cmd := exec.Command("/bin/true")
	cmd.SysProcAttr = &syscall.SysProcAttr{Ptrace: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	var ws unix.WaitStatus
	_, err := unix.Wait4(cmd.Process.Pid, &ws, 0, nil)
	if err == nil && !(ws.Stopped() && ws.StopSignal() == unix.SIGTRAP) {
		err = fmt.Errorf("wait status %#x, want a SIGTRAP stop", ws)
	}
	if err == nil {
		err = unix.PtraceDetach(cmd.Process.Pid)
	}
	if err != nil {
		_ = cmd.Process.Kill()
	}
	if werr := cmd.Wait(); err == nil {
		err = werr
	}
	return err
}

// unshareMountAsNobody runs `unshare -r -m mount -t tmpfs` as an
// unprivileged user: what a sandboxed command would try.
func unshareMountAsNobody() error {
	path, err := exec.LookPath("unshare")
	if err != nil {
		return errors.New("skip: no unshare")
	}
	cmd := exec.Command(path, "-r", "-m", "mount", "-t", "tmpfs", "tmpfs", "/tmp")
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%v: %s", err, bytes.TrimSpace(out))
	}
	return nil
}

// runHelper runs the helper in a child process and returns its results.
func runHelper(t *testing.T, mode string) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestHelperProcess$")
	cmd.Env = append(os.Environ(), helperEnv+"="+mode, dirEnv+"="+dir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s helper: %v\nstdout:\n%s\nstderr:\n%s", mode, err, out, stderr.Bytes())
	}
	results := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), "=")
		if !ok {
			t.Fatalf("%s helper: unexpected line %q", mode, sc.Text())
		}
		results[k] = v
	}
	keys := make([]string, 0, len(results))
	for k := range results {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		t.Logf("%s: %s=%s", mode, k, results[k])
	}
	// The child's mounts stayed in its own namespace.
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(mounts, []byte(" "+dir+" ")) {
		t.Errorf("%s helper: a mount on %s leaked to the test's namespace", mode, dir)
	}
	return results
}

func TestFilter(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the child makes a mount namespace and mounts in it")
	}
	if nativeArch == 0 {
		t.Skipf("%s is not supported", runtime.GOARCH)
	}
	base := runHelper(t, "baseline")
	filt := runHelper(t, "filtered")

	expect := func(results map[string]string, mode, key, want string) {
		t.Helper()
		got, ok := results[key]
		if !ok {
			t.Errorf("%s: no result for %s", mode, key)
		} else if got != want {
			t.Errorf("%s: %s = %s, want %s", mode, key, got, want)
		}
	}

	// Without the filter the child can do what the filter stops, so the
	// filter is what stops it.
	for _, key := range []string{"exec_cloneflags_newuser", "exec_unshareflags_newuser", "mount", "umount2"} {
		expect(base, "baseline", key, "ok")
		expect(filt, "filtered", key, "EPERM")
	}
	expect(filt, "filtered", "unshare_newuser", "EPERM")
	if got := base["unshare_newuser"]; got == "EPERM" {
		t.Errorf("baseline: unshare_newuser = EPERM: cannot tell the filter's EPERM apart")
	}

	switch got := base["unshare_r_mount_as_nobody"]; {
	case strings.HasPrefix(got, "skip"):
		t.Log("no unshare command: skipped unshare -r -m mount")
	case got != "ok":
		t.Logf("baseline: unshare -r -m mount fails even without the filter (%s): only the filtered failure is checked", got)
		fallthrough
	default:
		if got := filt["unshare_r_mount_as_nobody"]; got == "ok" || !strings.Contains(got, "Operation not permitted") {
			t.Errorf("filtered: unshare -r -m mount as nobody = %s, want a failure with EPERM", got)
		}
	}

	if base["clone3"] == "ENOSYS" {
		t.Log("baseline: the kernel has no clone3")
	} else {
		expect(base, "baseline", "clone3", "EINVAL")
	}
	expect(filt, "filtered", "clone3", "ENOSYS")

	for _, s := range denied() {
		key := "probe_" + s.name
		expect(filt, "filtered", key, "EPERM")
		if base[key] == "EPERM" {
			t.Logf("baseline: %s fails with EPERM even without the filter", s.name)
		}
	}
	if x32Bit != 0 {
		expect(filt, "filtered", "x32_getpid", "EPERM")
		if base["x32_getpid"] == "EPERM" {
			t.Errorf("baseline: x32_getpid = EPERM")
		}
	}

	expectArgProbes(t, base, filt)

	for _, key := range []string{"threads_before", "threads_new", "exec_true", "read_file", "ptrace", "unshare_newns"} {
		expect(base, "baseline", key, "ok")
		expect(filt, "filtered", key, "ok")
	}
}

// argProbes tries the calls that argRules decide, for real: those that
// must be refused (which work without the filter) and those that must
// keep working.
func argProbes(report func(string, error)) {
	sock := func(family, typ, proto int) error {
		fd, err := unix.Socket(family, typ|unix.SOCK_CLOEXEC, proto)
		if err == nil {
			unix.Close(fd)
		}
		return err
	}
	report("socket_vsock", sock(unix.AF_VSOCK, unix.SOCK_STREAM, 0))
	report("socket_alg", sock(unix.AF_ALG, unix.SOCK_SEQPACKET, 0))
	report("socket_netlink_uevent", sock(unix.AF_NETLINK, unix.SOCK_DGRAM, unix.NETLINK_KOBJECT_UEVENT))
	report("socket_unix", sock(unix.AF_UNIX, unix.SOCK_STREAM, 0))
	report("socket_inet", sock(unix.AF_INET, unix.SOCK_STREAM, 0))
	report("socket_inet6", sock(unix.AF_INET6, unix.SOCK_DGRAM, 0))
	report("socket_netlink_route", sock(unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_ROUTE))
	report("socket_netlink_sock_diag", sock(unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_SOCK_DIAG))
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err == nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
	}
	report("socketpair_unix", err)

	// personality: READ_IMPLIES_EXEC is refused, a query is not. Each
	// success is undone.
	persona := func(p uintptr) error {
		old, _, e := unix.Syscall(unix.SYS_PERSONALITY, p, 0, 0)
		if e == 0 {
			_, _, _ = unix.Syscall(unix.SYS_PERSONALITY, old, 0, 0)
		}
		return errnoErr(e)
	}
	report("personality_read_implies_exec", persona(0x0400000))
	report("personality_query", persona(0xffffffff))
	report("personality_linux", persona(0))

	// ioctl: a btrfs subvolume create through a descriptor that is not
	// on btrfs fails with ENOTTY without the filter (the request reaches
	// the file's ioctl and is not its), EPERM with it; FICLONE and
	// FIONREAD reach the kernel in both cases.
	f, err := os.CreateTemp("", "seccomp-ioctl")
	if err != nil {
		report("ioctl_btrfs_subvol_create", err)
		return
	}
	defer os.Remove(f.Name())
	defer f.Close()
	var args [4096]byte
	_, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), 0x5000940e, uintptr(unsafe.Pointer(&args[0]))) // BTRFS_IOC_SUBVOL_CREATE
	report("ioctl_btrfs_subvol_create", errnoErr(e))
	_, _, e = unix.Syscall(unix.SYS_IOCTL, f.Fd(), 0x50009418, uintptr(unsafe.Pointer(&args[0]))) // BTRFS_IOC_SUBVOL_CREATE_V2
	report("ioctl_btrfs_subvol_create_v2", errnoErr(e))
	_, _, e = unix.Syscall(unix.SYS_IOCTL, f.Fd(), 0xffffffff_5000940e, uintptr(unsafe.Pointer(&args[0])))
	report("ioctl_btrfs_subvol_create_high_word", errnoErr(e))
	_, _, e = unix.Syscall(unix.SYS_IOCTL, f.Fd(), unix.FICLONE, f.Fd())
	report("ioctl_ficlone", errnoErr(e))
	report("ioctl_fionread", func() error { _, err := unix.IoctlGetInt(int(f.Fd()), unix.TIOCINQ); return err }())
}

func expectArgProbes(t *testing.T, base, filt map[string]string) {
	t.Helper()
	for key, want := range map[string]string{
		"socket_vsock":                        "EAFNOSUPPORT",
		"socket_netlink_uevent":               "EPROTONOSUPPORT",
		"personality_read_implies_exec":       "EPERM",
		"ioctl_btrfs_subvol_create":           "EPERM",
		"ioctl_btrfs_subvol_create_v2":        "EPERM",
		"ioctl_btrfs_subvol_create_high_word": "EPERM",
	} {
		if got := filt[key]; got != want {
			t.Errorf("filtered: %s = %s, want %s", key, got, want)
		}
		if got := base[key]; got == want {
			t.Errorf("baseline: %s = %s without the filter: the test cannot tell the filter's refusal apart", key, got)
		}
	}
	for _, key := range []string{"socket_unix", "socket_inet", "socket_inet6", "socket_netlink_route",
		"socket_netlink_sock_diag", "socketpair_unix", "personality_query", "personality_linux", "ioctl_fionread"} {
		if base[key] != "ok" || filt[key] != "ok" {
			t.Errorf("%s: baseline %s, filtered %s; want ok in both", key, base[key], filt[key])
		}
	}
	// This kernel may lack AF_ALG: only the filtered answer is checked.
	if got := filt["socket_alg"]; got != "EAFNOSUPPORT" {
		t.Errorf("filtered: socket_alg = %s, want EAFNOSUPPORT", got)
	}
	// FICLONE of a file onto itself is EINVAL from the kernel (or
	// EOPNOTSUPP off btrfs): never the filter's EPERM.
	if filt["ioctl_ficlone"] == "EPERM" || filt["ioctl_ficlone"] != base["ioctl_ficlone"] {
		t.Errorf("ioctl FICLONE: baseline %s, filtered %s; want the kernel's answer in both", base["ioctl_ficlone"], filt["ioctl_ficlone"])
	}
}
