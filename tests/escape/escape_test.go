// Package escape tries to get out of a sandbox. Each test does something
// from inside a sandbox that must fail, and shows that the same thing
// succeeds outside, so that a failure inside proves the sandbox, not a
// broken test. The sandboxes are real: the supervisor, its init, systemd
// scopes with limits and btrfs, in the testbed (which has its own network
// namespace: "the host's loopback" and the test hosts are the testbed's).
package escape

import (
	"context"
	"fmt"
	"github.com/sandboxd/sandboxd/supervisor/commands"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/runtime/egress"
	"github.com/sandboxd/sandboxd/runtime/nsinit"
	"github.com/sandboxd/sandboxd/supervisor"
	"github.com/sandboxd/sandboxd/supervisor/supervisortest"
	"github.com/sandboxd/sandboxd/tests/testbed"
	"github.com/sandboxd/sandboxd/units"
)

func TestMain(m *testing.M) { supervisortest.Main(m) }

// ctx is the daemon's own: the tests call the supervisor as it does.
var ctx = supervisor.WithActor(context.Background(), supervisor.Daemon("test"))

// nobody is the unprivileged user commands run as, unless a test asks
// for root.
const nobody = 65534

// users are who each escape is tried as: nobody, and root inside (the
// sandbox's own root, nobody on the host: its user namespace's).
var users = []uint32{nobody, 0}

// box is one sandbox and the supervisor that made it.
type box struct {
	env *supervisortest.Env
	sb  supervisor.Sandbox
}

func newBox(t *testing.T, opts supervisor.CreateOptions) *box {
	t.Helper()
	return newBoxIn(t, newEnv(t), opts)
}

// newEnv is a supervisor whose sandboxes are in user namespaces.
func newEnv(t *testing.T) *supervisortest.Env {
	t.Helper()
	return supervisortest.NewUserNS(t, "esc", nil)
}

func newBoxIn(t *testing.T, e *supervisortest.Env, opts supervisor.CreateOptions) *box {
	t.Helper()
	opts.Project = "web"
	sb, err := e.Sup.Create(ctx, opts)
	if err != nil {
		t.Fatalf("creating a sandbox: %v", err)
	}
	return &box{env: e, sb: sb}
}

// run runs script with sh in the sandbox as uid (0: as its root), and returns
// its output (stdout and stderr) and how it ended.
func (b *box) run(t *testing.T, uid uint32, script string, tweak ...func(*commands.ExecOptions)) (string, nsinit.Result) {
	t.Helper()
	null, w, collect := testbed.Capture(t)
	o := commands.ExecOptions{
		Argv: []string{"/bin/sh", "-c", script}, UID: uid, AsRoot: uid == 0,
		Stdio: []*os.File{null, w, w}, Timeout: 60 * time.Second,
	}
	for _, f := range tweak {
		f(&o)
	}
	cmd, err := b.env.Commands.Exec(ctx, b.sb.ID, o)
	out := collect()
	if err != nil {
		t.Fatalf("running %q in sandbox %s: %v", script, b.sb.ID, err)
	}
	return out, cmd.Result()
}

// mustFail runs script in the sandbox and fails the test if it succeeds.
func (b *box) mustFail(t *testing.T, uid uint32, what, script string) {
	t.Helper()
	out, res := b.run(t, uid, script)
	if res.How == nsinit.Exited && res.Code == 0 {
		t.Errorf("ESCAPE: %s succeeded inside the sandbox (uid %d): %s\n%s", what, uid, script, out)
	}
}

// outside runs script as uid in the testbed, outside any sandbox, and
// fails the test unless it succeeds.
func outside(t *testing.T, uid uint32, what, script string) string {
	t.Helper()
	argv := []string{"/bin/sh", "-c", script}
	if uid != 0 {
		argv = append([]string{"setpriv", fmt.Sprintf("--reuid=%d", uid), fmt.Sprintf("--regid=%d", uid), "--clear-groups"}, argv...)
	}
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s outside the sandbox (the control): %v: %s", what, err, out)
	}
	return string(out)
}

func TestHostSecretsAndOtherProjectsAreNotVisible(t *testing.T) {
	tb := testbed.Require(t)
	secret := fmt.Sprintf("/root/sandboxd-escape-%d", os.Getpid())
	if err := os.WriteFile(secret, []byte("the host's secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(secret)
	other := filepath.Join(tb.Btrfs.Mount, fmt.Sprintf("escape-other-%d", os.Getpid()))
	testbed.MustRun(t, "btrfs", "subvolume", "create", other)
	defer testbed.MustRun(t, "btrfs", "subvolume", "delete", other)
	if err := os.WriteFile(filepath.Join(other, "secret.txt"), []byte("another project's secret\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t)
	e.Config.Projects["other"] = other
	e.Remake(t)
	b := newBoxIn(t, e, supervisor.CreateOptions{})

	outside(t, 0, "reading the planted secret", "cat "+secret)
	outside(t, nobody, "reading another project's file", "cat "+other+"/secret.txt")
	for _, uid := range users {
		b.mustFail(t, uid, "reading the host's /root", "cat "+secret)
		b.mustFail(t, uid, "reading another project", "cat "+other+"/secret.txt")
		b.mustFail(t, uid, "finding the project anywhere", "grep -rl \"another project's secret\" /mnt /srv /var /home /opt 2>/dev/null")
		b.mustFail(t, uid, "reading sandboxd's records", "ls "+e.Config.RuntimeDir)
	}
	if out, _ := b.run(t, nobody, "cat index.html"); out != supervisortest.Index {
		t.Errorf("the sandbox's own project (the control inside): %q", out)
	}
}

func TestNoNetworkReachesNothing(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go acceptAll(ln)
	host := testHost(t, "10.77.1")
	port := ln.Addr().(*net.TCPAddr).Port

	b := newBox(t, supervisor.CreateOptions{})
	for _, target := range []string{fmt.Sprintf("127.0.0.1/%d", port), host + "/8080"} {
		script := "exec 3<>/dev/tcp/" + target
		outside(t, nobody, "connecting to "+target, "bash -c '"+script+"'")
		for _, uid := range users {
			b.mustFail(t, uid, "connecting to "+target, "bash -c '"+script+"'")
		}
	}
	for _, uid := range users {
		if out, _ := b.run(t, uid, "ls /sys/class/net"); out != "lo\n" {
			t.Errorf("network interfaces in a sandbox without network (uid %d): %q; want only lo", uid, out)
		}
	}
}

func TestAllowlistLetsOnlyListedTargetsThrough(t *testing.T) {
	host := testHost(t, "10.77.2")
	b := newBox(t, supervisor.CreateOptions{Network: nsinit.NetworkAllowlist, Allow: []string{host + ":8080"}})
	url := "http://" + host
	outside(t, nobody, "fetching the test host's other port", "curl -sSf "+url+":8081/")
	// Through the proxy (the sandbox's environment points curl there).
	if out, res := b.run(t, nobody, "curl -sSf "+url+":8080/"); res.How != nsinit.Exited || res.Code != 0 || out != "hello from "+host+"\n" {
		t.Errorf("a listed target through the proxy: %v: %q", res, out)
	}
	for _, uid := range users {
		b.mustFail(t, uid, "reaching an unlisted port through the proxy", "curl -sSf "+url+":8081/")
		b.mustFail(t, uid, "a CONNECT to an unlisted port", "curl -sSf -p "+url+":8081/")
		b.mustFail(t, uid, "reaching a listed target without the proxy", "curl -sSf --noproxy '*' --max-time 5 "+url+":8080/")
	}
}

func TestLimitsStopTheCommandNotTheHost(t *testing.T) {
	b := newBox(t, supervisor.CreateOptions{
		Limits:    limits(64<<20, 64),
		DiskQuota: 32 << 20,
	})
	for _, uid := range users {
		// Memory: tail keeps its line, and /dev/zero has no end of line.
		out, res := b.run(t, uid, "tail /dev/zero")
		if res.How != nsinit.OOMKilled {
			t.Errorf("a command past MemoryMax (uid %d): %v (%s); want killed by the memory limit", uid, res, out)
		}
		// The killed command's memory is given back (until then a fork in
		// the sandbox can fail for want of memory).
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			in, err := b.env.Sup.Inspect(ctx, b.sb.ID, supervisor.LiveUsage)
			if err == nil && in.Memory.Value < 32<<20 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the sandbox's memory 10s after the OOM kill: %+v %v", in.Memory, err)
			}
		}
	}
	for _, uid := range users {
		tasksHeld(t, b, uid)
	}
	// Disk: writes past the quota fail in the sandbox, in the project
	// and in the system layer.
	for _, dir := range []string{".", "/usr/local"} {
		out, res := b.run(t, 0, "dd if=/dev/zero of="+dir+"/big bs=1M count=64 2>&1; rm -f "+dir+"/big")
		if !strings.Contains(out, "Disk quota exceeded") && !strings.Contains(out, "No space left") {
			t.Errorf("writing 64 MiB to %s under a 32 MiB quota: %v: %s", dir, res, out)
		}
	}
	// The host, the daemon and the sandbox itself carry on.
	outside(t, nobody, "forking on the host", "for i in 1 2 3; do /bin/true & done; wait")
	outside(t, 0, "writing to the pool", "dd if=/dev/zero of="+filepath.Dir(b.env.Project)+"/escape-after bs=1M count=40 2>&1 && rm "+filepath.Dir(b.env.Project)+"/escape-after")
	if _, err := b.env.Sup.List(ctx); err != nil {
		t.Errorf("the supervisor after the limits were hit: %v", err)
	}
	if out, res := b.run(t, nobody, "echo alive"); out != "alive\n" {
		t.Errorf("the sandbox after its limits were hit: %v %q", res, out)
	}
}

// tasksHeld shows, as uid, that forks beyond the sandbox's TasksMax (64)
// fail in the sandbox, and that a fork bomb is held and ends.
func tasksHeld(t *testing.T, b *box, uid uint32) {
	t.Helper()
	// The loop's subshell gives up at its first failed fork; the command
	// then execs (no fork needed) a sleep, while its group holds what it
	// made.
	null, w, collect := testbed.Capture(t)
	cmd, err := b.env.Commands.Exec(ctx, b.sb.ID, commands.ExecOptions{
		Argv: []string{"/bin/sh", "-c", "(for i in $(seq 200); do sleep 3 & done); exec sleep 2"}, UID: uid, AsRoot: uid == 0,
		Stdio: []*os.File{null, w, w}, Timeout: 30 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	in, err := b.env.Sup.Inspect(ctx, b.sb.ID, supervisor.LiveUsage)
	if out := collect(); !strings.Contains(out, "fork") {
		t.Errorf("200 processes in a sandbox with TasksMax 64 (uid %d): no fork failed: %q", uid, out)
	}
	if err != nil || in.Tasks.Value > 64 || in.Tasks.Value < 32 {
		t.Errorf("tasks of a sandbox with TasksMax 64 that tried 200 (uid %d): %+v %v", uid, in.Tasks, err)
	}
	if res := cmd.Result(); res.How != nsinit.Exited || res.Code != 0 {
		t.Errorf("the command that filled TasksMax (uid %d): %v", uid, res)
	}
	tasksSettle(t, b, "the command that filled TasksMax")

	// A fork bomb is held by TasksMax, and ends: by the timeout, or when
	// its shell gives up at a failed fork; its children go with it.
	_, res := b.run(t, uid, "b(){ b|b& }; b; sleep 30", func(o *commands.ExecOptions) { o.Timeout = 3 * time.Second })
	if res.How != nsinit.TimedOut && (res.How != nsinit.Exited || res.Code == 0) {
		t.Errorf("a fork bomb with a timeout of 3s (uid %d): %v", uid, res)
	}
	tasksSettle(t, b, "the fork bomb ended")
}

// tasksSettle waits until what a command left of the sandbox's tasks is
// gone.
func tasksSettle(t *testing.T, b *box, after string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		in, err := b.env.Sup.Inspect(ctx, b.sb.ID, supervisor.LiveUsage)
		if err == nil && in.Tasks.Value <= 16 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the sandbox's tasks 10s after %s: %+v %v", after, in.Tasks, err)
		}
	}
}

func TestNothingPersistsAcrossDestroyAndCreate(t *testing.T) {
	e := newEnv(t)
	b := newBoxIn(t, e, supervisor.CreateOptions{})
	out, res := b.run(t, 0, "echo left > index.html && echo left > /etc/escape-marker && echo left > /tmp/escape-marker && echo left > /var/tmp/escape-marker")
	if res.Code != 0 {
		t.Fatalf("writing markers: %v %s", res, out)
	}
	if err := e.Sup.Destroy(ctx, b.sb.ID); err != nil {
		t.Fatal(err)
	}
	b2 := newBoxIn(t, e, supervisor.CreateOptions{})
	b2.mustFail(t, 0, "finding a destroyed sandbox's files", "grep -rqs left index.html /etc/escape-marker /tmp/escape-marker /var/tmp/escape-marker")
	for _, p := range []string{"/etc/escape-marker", "/var/tmp/escape-marker", filepath.Join(e.Project, "index.html")} {
		if b, err := os.ReadFile(p); err == nil && string(b) == "left\n" {
			t.Errorf("the host's %s has the sandbox's write", p)
		}
	}
}

func TestHostProcessesAreInvisibleAndUnreachable(t *testing.T) {
	sleeper := exec.Command("/bin/sleep", "300")
	sleeper.Env = []string{"ESCAPE_SECRET=the host's environment"}
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sleeper.Process.Kill(); _ = sleeper.Wait() }() // the one this test started
	pid := fmt.Sprint(sleeper.Process.Pid)
	b := newBox(t, supervisor.CreateOptions{})
	// Through the host process's root: a file in the host's /tmp.
	procRoot := fmt.Sprintf("/proc/%s/root/tmp/escape-procroot-%d", pid, os.Getpid())
	hostFile := fmt.Sprintf("/tmp/escape-procroot-%d", os.Getpid())
	defer os.Remove(hostFile)
	cases := []struct{ what, script string }{
		{"signalling a host process", "kill -0 " + pid},
		{"seeing a host process", "test -d /proc/" + pid + " && grep -q sleep /proc/" + pid + "/cmdline"},
		{"reading a host process's environment", "grep -q ESCAPE_SECRET /proc/" + pid + "/environ"},
		{"tracing a host process", python(syscallOK + "ok(libc.ptrace(0x4206, " + pid + ", 0, 0))")}, // PTRACE_SEIZE
		{"writing through a host process's /proc/PID/root", "echo x > " + procRoot},
	}
	for _, c := range cases {
		outside(t, 0, c.what, c.script)
	}
	if err := os.Remove(hostFile); err != nil {
		t.Fatalf("the control wrote no %s through %s: %v", hostFile, procRoot, err)
	}
	for _, uid := range users {
		for _, c := range cases {
			b.mustFail(t, uid, c.what, c.script)
		}
		b.mustFail(t, uid, "seeing the host's processes", "test $(ls /proc | grep -c '^[0-9]') -gt 10")
		if _, err := os.Stat(hostFile); err == nil {
			t.Errorf("ESCAPE: the host's %s was written from a sandbox (uid %d)", hostFile, uid)
		}
	}
	b.mustFail(t, nobody, "signalling the sandbox's init", "kill -9 1")
	// Root inside may signal its own init, which the kernel keeps alive:
	// its pid namespace's init ignores what its namespace sends it.
	b.run(t, 0, "kill -9 1; sleep 0.2")
	if out, res := b.run(t, nobody, "echo alive"); out != "alive\n" {
		t.Errorf("ESCAPE: the sandbox after its root sent its init SIGKILL: %v %q", res, out)
	}
}

// TestProcRootLandsInTheSandbox: root inside writing through its init's
// /proc/1/root (or its own, or its init's cwd) writes the sandbox's
// files, not the host's: where the write is allowed at all, it shows in
// the sandbox's /etc.
func TestProcRootLandsInTheSandbox(t *testing.T) {
	b := newBox(t, supervisor.CreateOptions{})
	for i, dir := range []string{"/proc/self/root/etc", "/proc/1/root/etc", "/proc/1/root/../../etc", "/proc/1/cwd/../../../../etc"} {
		name := fmt.Sprintf("escape-procroot-%d-%d", os.Getpid(), i)
		out, res := b.run(t, 0, "echo x > "+dir+"/"+name)
		if res.How == nsinit.Exited && res.Code == 0 {
			if got, r := b.run(t, 0, "cat /etc/"+name); got != "x\n" {
				t.Errorf("root inside wrote %s/%s, and the sandbox's /etc has no %s: %v %q", dir, name, name, r, got)
			}
		} else {
			t.Logf("root inside writing %s/%s: refused: %v %s", dir, name, res, out)
		}
		if i == 0 && res.Code != 0 {
			t.Errorf("root inside writing its own /etc through %s: %v %s", dir, res, out)
		}
		if _, err := os.Stat("/etc/" + name); err == nil {
			os.Remove("/etc/" + name)
			t.Errorf("ESCAPE: the host's /etc/%s was written from a sandbox through %s", name, dir)
		}
	}
}

func TestPrivilegedActionsFail(t *testing.T) {
	tb := testbed.Require(t)
	b := newBox(t, supervisor.CreateOptions{})
	dev := strings.TrimSpace(testbed.MustRun(t, "findmnt", "-no", "SOURCE", tb.Btrfs.Mount))
	outside(t, 0, "mounting a tmpfs", "d=$(mktemp -d) && unshare -m sh -c \"mount -t tmpfs none $d\" && rmdir $d")
	outside(t, 0, "reading a raw disk", "head -c 512 "+dev+" | wc -c | grep -qx 512")
	if !hasCap(outside(t, 0, "reading capabilities", "grep CapEff /proc/self/status"), capSysModule) {
		t.Fatal("root outside the sandbox cannot load modules: the control of this test does not hold")
	}
	outside(t, 0, "finding a block device", "find /dev -type b | grep -q .")
	mounts := mountTable(t)
	for _, c := range []struct{ what, script string }{
		{"mounting a tmpfs", "mount -t tmpfs none /mnt"},
		{"mounting a tmpfs in a new mount namespace", "unshare -m mount -t tmpfs none /mnt"},
		{"mounting in a new user namespace", "unshare -rm mount -t tmpfs none /mnt"},
		{"loading a kernel module", "modprobe -q dummy || insmod /lib/modules/$(uname -r)/kernel/drivers/net/dummy.ko"},
		{"finding a block device", "find /dev -type b | grep -q ."},
		{"reading a raw disk", "head -c 512 " + dev + " | wc -c | grep -qx 512"},
		{"making a disk's device node", "mknod /tmp/disk b 7 0 && head -c 512 /tmp/disk | wc -c | grep -qx 512"},
		{"changing a kernel setting", "echo 1 > /proc/sys/kernel/sysrq"},
		{"rebooting the host through sysrq", "echo s > /proc/sysrq-trigger"},
	} {
		for _, uid := range users {
			b.mustFail(t, uid, c.what, c.script)
		}
	}
	if after := mountTable(t); after != mounts {
		t.Errorf("ESCAPE: the host's mount table changed while a sandbox tried to mount:\nbefore:\n%s\nafter:\n%s", mounts, after)
	}
	if out, _ := b.run(t, 0, "grep CapEff /proc/self/status"); hasCap(out, capSysModule) || hasCap(out, capSysAdmin) {
		t.Errorf("root in the sandbox may load modules or administer the system: %s", out)
	}
	// Removing a module that is not loaded: no such module for the
	// host's root (or no modules at all, on a kernel without them), not
	// allowed at all in the sandbox.
	switch out := strings.TrimSpace(outside(t, 0, "removing a module", deleteModule)); out {
	case "No such file or directory":
	case "Function not implemented":
		t.Log("this kernel has no module support: delete_module is ENOSYS outside, so EPERM inside is the sandbox's filter")
	default:
		t.Fatalf("the control: removing a module that is not loaded, as root outside: %q; want ENOENT (or ENOSYS)", out)
	}
	for _, uid := range users {
		if out, _ := b.run(t, uid, deleteModule); strings.TrimSpace(out) != "Operation not permitted" {
			t.Errorf("removing a module in the sandbox (uid %d): %q; want \"Operation not permitted\"", uid, out)
		}
	}
}

// deleteModule tries delete_module(2) on a module that is not loaded and
// prints the error ("ok": none).
var deleteModule = python("import ctypes, os\n" +
	"libc = ctypes.CDLL(None, use_errno=True)\n" +
	fmt.Sprintf("r = libc.syscall(%d, b\"escape_no_such_module\", 0x800)\n", map[string]int{"amd64": 176, "arm64": 106}[runtime.GOARCH]) +
	"print(os.strerror(ctypes.get_errno()) if r == -1 else \"ok\")")

// mountTable is the mounts of the testbed's mount namespace, where the
// test runs.
func mountTable(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestTheHostsSystemIsUnchanged(t *testing.T) {
	b := newBox(t, supervisor.CreateOptions{})
	marker := fmt.Sprintf("escape-%d", os.Getpid())
	out, res := b.run(t, 0, "echo x > /etc/"+marker+" && echo x > /usr/bin/"+marker+" && rm -f /usr/bin/env && test ! -e /usr/bin/env")
	if res.Code != 0 {
		t.Fatalf("changing /etc and /usr as root in the sandbox (its own layer): %v %s", res, out)
	}
	for _, p := range []string{"/etc/" + marker, "/usr/bin/" + marker} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("ESCAPE: the host's %s was written from a sandbox", p)
		}
	}
	if _, err := os.Stat("/usr/bin/env"); err != nil {
		t.Errorf("ESCAPE: the host's /usr/bin/env is gone after a sandbox removed its own: %v", err)
	}
}

func TestTheHostsBusAndSandboxdAreOutOfReach(t *testing.T) {
	b := newBox(t, supervisor.CreateOptions{})
	outside(t, 0, "calling systemd on the system bus", "busctl --system call org.freedesktop.systemd1 /org/freedesktop/systemd1 org.freedesktop.DBus.Peer Ping")
	outside(t, 0, "finding the system bus's socket", "test -S /run/dbus/system_bus_socket")
	outside(t, 0, "finding sandboxd's control sockets", "ls "+b.env.Config.RuntimeDir+"/*/control")
	for _, uid := range users {
		b.mustFail(t, uid, "calling systemd on the system bus", "busctl --system call org.freedesktop.systemd1 /org/freedesktop/systemd1 org.freedesktop.DBus.Peer Ping")
		b.mustFail(t, uid, "finding the system bus's socket", "test -S /run/dbus/system_bus_socket")
		b.mustFail(t, uid, "finding sandboxd's control sockets", "ls "+b.env.Config.RuntimeDir+"/*/control")
	}
}

// testHost makes a network namespace with a veth pair to the testbed's,
// at net.2 (the testbed side is net.1), serving HTTP on ports 8080 and
// 8081: "hello from net.2". It is removed when the test ends.
func testHost(t *testing.T, prefix string) string {
	t.Helper()
	name := "esc" + strings.ReplaceAll(prefix, ".", "")[2:]
	ip := prefix + ".2"
	testbed.MustRun(t, "ip", "netns", "add", name)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
	testbed.MustRun(t, "ip", "link", "add", "v"+name, "type", "veth", "peer", "name", "eth0", "netns", name)
	testbed.MustRun(t, "ip", "addr", "add", prefix+".1/24", "dev", "v"+name)
	testbed.MustRun(t, "ip", "link", "set", "v"+name, "up")
	testbed.MustRun(t, "ip", "-n", name, "addr", "add", ip+"/24", "dev", "eth0")
	testbed.MustRun(t, "ip", "-n", name, "link", "set", "eth0", "up")
	testbed.MustRun(t, "ip", "-n", name, "link", "set", "lo", "up")
	for _, port := range []string{"8080", "8081"} {
		ln, err := egress.ListenInNetNS("/run/netns/"+name, ip+":"+port)
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			fmt.Fprintf(w, "hello from %s\n", ip)
		})}
		go func() { _ = srv.Serve(ln) }()
		t.Cleanup(func() { _ = srv.Close() })
	}
	return ip
}

func acceptAll(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		c.Close()
	}
}

// Capability bits (linux/capability.h).
const (
	capSysModule = 16
	capSysAdmin  = 21
)

// hasCap reads a "CapEff:\t<hex>" line.
func hasCap(line string, bit uint) bool {
	var mask uint64
	_, err := fmt.Sscanf(strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "CapEff:")), "%x", &mask)
	return err == nil && mask&(1<<bit) != 0
}

func limits(memory, tasks uint64) units.Limits {
	return units.Limits{MemoryMax: new(memory), TasksMax: new(tasks)}
}
