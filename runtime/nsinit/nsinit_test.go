package nsinit_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/runtime/nsinit"
	"github.com/sandboxd/sandboxd/tests/testbed"
)

func TestMain(m *testing.M) {
	if nsinit.IsInit() {
		nsinit.Main()
	}
	testbed.Main(m)
}

var sandboxes atomic.Int64

// world is a sandbox built by an init that this test started.
type world struct {
	spec   nsinit.Spec
	socket string
	pid    int
}

// start builds a sandbox whose project holds file.txt, with /root
// hidden; change adjusts the spec first.
func start(t *testing.T, change func(*nsinit.Spec)) *world {
	t.Helper()
	tb := testbed.Require(t)
	n := sandboxes.Add(1)
	base := filepath.Join(tb.Btrfs.Mount, fmt.Sprintf("nsinit-%d-%d", os.Getpid(), n))
	project := filepath.Join(base, "project")
	if err := os.MkdirAll(project, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(project, "file.txt"), []byte("from the project\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	spec := nsinit.Spec{
		ID:       fmt.Sprint(n),
		Hostname: fmt.Sprintf("sandbox-%d", n),
		Dir:      filepath.Join(t.TempDir(), "run"),
		Layer:    filepath.Join(base, "layer"),
		Project:  nsinit.Bind{Source: project, Target: fmt.Sprintf("/srv/project-%d", n)},
		Hidden:   []string{"/root"},
		Network:  nsinit.NetworkNone,
	}
	if change != nil {
		change(&spec)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	pid, err := nsinit.Start(ctx, []string{os.Args[0]}, spec)
	if err != nil {
		t.Fatalf("starting the init: %v", err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(pid, syscall.SIGKILL) // the init this test started
		var ws syscall.WaitStatus
		for {
			if _, err := syscall.Wait4(pid, &ws, 0, nil); err != syscall.EINTR {
				break
			}
		}
		_ = os.RemoveAll(base)
	})
	return &world{spec: spec, socket: nsinit.Control(spec.Dir), pid: pid}
}

// run runs argv in the sandbox as uid with req's other settings, and
// returns its stdout and stderr and result.
func (w *world) run(t *testing.T, req nsinit.Request, argv ...string) (string, string, nsinit.Result) {
	t.Helper()
	req.Argv = argv
	if req.Env == nil {
		req.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "HOME=/"}
	}
	stdin, err := os.Open("/dev/null")
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	outR, outW, _ := os.Pipe()
	errR, errW, _ := os.Pipe()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd, err := nsinit.Exec(ctx, w.socket, req, []*os.File{stdin, outW, errW})
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		t.Fatalf("running %q: %v", argv, err)
	}
	var stderr bytes.Buffer
	done := make(chan struct{})
	go func() { _, _ = io.Copy(&stderr, errR); close(done) }()
	stdout, _ := io.ReadAll(outR)
	<-done
	res, err := cmd.Wait(ctx)
	if err != nil {
		t.Fatalf("waiting for %q: %v", argv, err)
	}
	return string(stdout), stderr.String(), res
}

func (w *world) sh(t *testing.T, uid uint32, script string) (string, nsinit.Result) {
	t.Helper()
	out, errOut, res := w.run(t, nsinit.Request{UID: uid, GID: uid}, "/bin/sh", "-c", script)
	return out + errOut, res
}

func TestTheSandboxSeesTheHostsOSAndItsOwnProject(t *testing.T) {
	w := start(t, nil)
	host, _ := os.ReadFile("/etc/os-release")
	for _, c := range []struct{ script, want string }{
		{"hostname", w.spec.Hostname + "\n"},
		{"cat " + w.spec.Project.Target + "/file.txt", "from the project\n"},
		{"cat /etc/os-release", string(host)},
		{"ls /sys/class/net", "lo\n"},
		{"cat /proc/1/comm", filepath.Base(os.Args[0])[:min(15, len(filepath.Base(os.Args[0])))] + "\n"},
		{"ls -A /root; echo end", "end\n"},
		{"id -u", "65534\n"},
		{"test -e /run/dbus/system_bus_socket && echo bus; echo end", "end\n"},
	} {
		out, res := w.sh(t, 65534, c.script)
		if res.How != nsinit.Exited || out != c.want {
			t.Errorf("%s in the sandbox: %q (%v), want %q", c.script, out, res, c.want)
		}
	}
}

func TestWritesGoToTheSandboxsOwnLayer(t *testing.T) {
	w := start(t, nil)
	name := fmt.Sprintf("sandboxd-layer-test-%d", os.Getpid())
	out, res := w.sh(t, 0, "echo mine > /etc/"+name+" && echo changed >> "+w.spec.Project.Target+"/file.txt")
	if res.How != nsinit.Exited || res.Code != 0 {
		t.Fatalf("writing as root in the sandbox: %v: %s", res, out)
	}
	if _, err := os.Stat("/etc/" + name); !os.IsNotExist(err) {
		t.Errorf("the host's /etc/%s exists after a sandbox wrote it (err %v)", name, err)
	}
	if b, err := os.ReadFile(filepath.Join(w.spec.Layer, "upper/etc", name)); err != nil || string(b) != "mine\n" {
		t.Errorf("the sandbox's layer has %q (%v), want its write", b, err)
	}
	if b, _ := os.ReadFile(filepath.Join(w.spec.Project.Source, "file.txt")); string(b) != "from the project\nchanged\n" {
		t.Errorf("the project's copy has %q after the sandbox wrote to it", b)
	}
}

func TestACommandEndsAndSaysHow(t *testing.T) {
	w := start(t, nil)
	if _, res := w.sh(t, 65534, "exit 3"); res != (nsinit.Result{How: nsinit.Exited, Code: 3}) {
		t.Errorf("exit 3: %+v", res)
	}
	if _, res := w.sh(t, 65534, "kill -9 $$"); res != (nsinit.Result{How: nsinit.Signaled, Signal: 9}) {
		t.Errorf("kill -9 $$: %+v", res)
	}
	_, _, res := w.run(t, nsinit.Request{UID: 65534, GID: 65534, Timeout: 200 * time.Millisecond}, "/bin/sleep", "30")
	if res.How != nsinit.TimedOut {
		t.Errorf("sleep 30 with a timeout of 200ms: %+v", res)
	}
	out, _, res := w.run(t, nsinit.Request{UID: 65534, GID: 65534, OutputLimit: 1000}, "/usr/bin/yes")
	if res.How != nsinit.OutputLimit || len(out) != 1000 {
		t.Errorf("yes with an output limit of 1000: %+v, %d bytes out", res, len(out))
	}
	_, _, res = w.run(t, nsinit.Request{UID: 65534, GID: 65534}, "/bin/echo", "fine")
	if res.How != nsinit.Exited || res.Code != 0 {
		t.Errorf("a command after those: %+v", res)
	}
}

func TestACommandThatCannotStartSaysWhy(t *testing.T) {
	w := start(t, nil)
	ctx := context.Background()
	f, _ := os.Open("/dev/null")
	defer f.Close()
	_, err := nsinit.Exec(ctx, w.socket, nsinit.Request{Argv: []string{"no-such-command-here"}}, []*os.File{f, f, f})
	if err == nil || !strings.Contains(err.Error(), "no-such-command-here: not found") {
		t.Errorf("a missing command: %v", err)
	}
	_, err = nsinit.Exec(ctx, w.socket, nsinit.Request{Argv: []string{"/bin/true"}, Dir: "/no/such/dir"}, []*os.File{f, f, f})
	if err == nil || !strings.Contains(err.Error(), "/no/such/dir") {
		t.Errorf("a missing directory: %v", err)
	}
}

func TestAPTYIsTheCommandsTerminal(t *testing.T) {
	w := start(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd, err := nsinit.Exec(ctx, w.socket, nsinit.Request{
		Argv: []string{"/bin/sh", "-c", "tty; stty size"}, UID: 65534, GID: 65534, PTY: true, Rows: 33, Cols: 101,
		Env: []string{"PATH=/usr/bin:/bin"},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cmd.Master.Close()
	var out bytes.Buffer
	go func() { _, _ = io.Copy(&out, cmd.Master) }()
	res, err := cmd.Wait(ctx)
	if err != nil || res.How != nsinit.Exited || res.Code != 0 {
		t.Fatalf("tty in a pty: %v %v", res, err)
	}
	time.Sleep(100 * time.Millisecond) // the last bytes in the pty's buffer
	if got := strings.ReplaceAll(out.String(), "\r", ""); got != "/dev/pts/0\n33 101\n" {
		t.Errorf("tty and stty size in a pty: %q", got)
	}
}

func TestTheSetupNamesWhatFailed(t *testing.T) {
	tb := testbed.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	spec := nsinit.Spec{
		ID: "broken", Hostname: "broken", Dir: filepath.Join(t.TempDir(), "run"),
		Layer:   filepath.Join(tb.Btrfs.Mount, fmt.Sprintf("nsinit-broken-%d", os.Getpid())),
		Project: nsinit.Bind{Source: "/no/such/project", Target: "/srv/x"},
		Network: nsinit.NetworkNone,
	}
	defer os.RemoveAll(spec.Layer)
	_, err := nsinit.Start(ctx, []string{os.Args[0]}, spec)
	if err == nil || !strings.Contains(err.Error(), "binding /no/such/project on /srv/x") {
		t.Errorf("a project that does not exist: %v", err)
	}
}

func TestRootInTheSandboxIsBounded(t *testing.T) {
	w := start(t, nil)
	for _, script := range []string{
		"mount -t tmpfs none /mnt",
		"unshare -r true",
		"unshare -m true",
		"echo 1 > /proc/sys/kernel/sysrq",
		"mknod /tmp/disk b 8 0",
		"cat /proc/kcore | head -c1 | wc -c | grep -qx 1",
	} {
		if out, res := w.sh(t, 0, script); res.How == nsinit.Exited && res.Code == 0 {
			t.Errorf("%s succeeded as root in the sandbox: %s", script, out)
		}
	}
	out, _ := w.sh(t, 0, "grep CapBnd /proc/self/status")
	if want := "CapBnd:\t00000000000404fb\n"; out != want {
		t.Errorf("the bounding set of root in the sandbox: %q, want %q", out, want)
	}
}

func TestAHiddenSymlinkHidesWhatItPointsTo(t *testing.T) {
	dir := fmt.Sprintf("/srv/nsinit-homes-%d", os.Getpid())
	link := dir + "-link"
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.WriteFile(dir+"/secret", []byte("secret\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(link)
	w := start(t, func(s *nsinit.Spec) { s.Hidden = append(s.Hidden, link) })
	for _, p := range []string{dir + "/secret", link + "/secret"} {
		if out, res := w.sh(t, 65534, "cat "+p); res.Code == 0 {
			t.Errorf("reading %s behind a hidden symlink: %q", p, out)
		}
	}
}

func TestAnOutputLimitDoesNotWaitForADaemon(t *testing.T) {
	w := start(t, nil)
	done := make(chan nsinit.Result, 1)
	go func() {
		_, _, res := w.run(t, nsinit.Request{UID: 65534, GID: 65534, OutputLimit: 1 << 20}, "/bin/sh", "-c", "setsid sleep 30 & echo started")
		done <- res
	}()
	select {
	case res := <-done:
		if res.How != nsinit.Exited || res.Code != 0 {
			t.Errorf("a command that left a daemon holding its output: %v", res)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a command that left a daemon holding its output did not end")
	}
}

func TestRelativeCommandsAndDirectoriesAsStdio(t *testing.T) {
	w := start(t, nil)
	if out, res := w.sh(t, 0, "printf '#!/bin/sh\\necho relative\\n' > /tmp/rel.sh && chmod 755 /tmp/rel.sh"); res.Code != 0 {
		t.Fatal(out)
	}
	out, _, res := w.run(t, nsinit.Request{UID: 65534, GID: 65534, Dir: "/tmp"}, "./rel.sh")
	if res.Code != 0 || out != "relative\n" {
		t.Errorf("./rel.sh in /tmp: %v %q", res, out)
	}
	dirFile, err := os.Open("/")
	if err != nil {
		t.Fatal(err)
	}
	defer dirFile.Close()
	_, err = nsinit.Exec(context.Background(), w.socket, nsinit.Request{Argv: []string{"/bin/true"}, UID: 65534, GID: 65534},
		[]*os.File{dirFile, dirFile, dirFile})
	if err == nil || !strings.Contains(err.Error(), "directory") {
		t.Errorf("a directory as stdin: %v; want it refused", err)
	}
}

// Reading a project file in the sandbox leaves it as it was (no access
// time written), so that a diff shows only what the sandbox changed.
func TestReadingAProjectFileDoesNotChangeIt(t *testing.T) {
	w := start(t, nil)
	file := filepath.Join(w.spec.Project.Source, "file.txt")
	var before, after syscall.Stat_t
	if err := syscall.Stat(file, &before); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	if out, res := w.sh(t, 65534, "cat "+w.spec.Project.Target+"/file.txt >/dev/null"); res.Code != 0 {
		t.Fatalf("reading: %v %s", res, out)
	}
	if err := syscall.Stat(file, &after); err != nil {
		t.Fatal(err)
	}
	if after.Atim != before.Atim {
		t.Errorf("reading file.txt in the sandbox changed its access time: %v -> %v", before.Atim, after.Atim)
	}
}
