package integration

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/tests/testbed"
)

// onPTY runs sandboxctl args with a terminal of the test's as its
// stdout and stderr, and as its stdin too unless stdin is given, as a
// user's shell would. It returns the terminal's master (the test types
// there) and a wait for sandboxctl's end, with what it showed.
func onPTY(t *testing.T, stdin string, args ...string) (*os.File, func() (string, int)) {
	t.Helper()
	master, slave := openPTY(t)
	t.Cleanup(func() { master.Close() })
	cmd := exec.Command(ctlBin(), args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	ctty := 0
	if stdin != "" {
		cmd.Stdin, ctty = strings.NewReader(stdin), 1
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: ctty}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	slave.Close()
	var mu sync.Mutex
	var screen bytes.Buffer
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := master.Read(buf)
			mu.Lock()
			screen.Write(buf[:n])
			mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	return master, func() (string, int) {
		werr := make(chan error, 1)
		go func() { werr <- cmd.Wait() }()
		select {
		case <-werr:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			t.Fatalf("sandboxctl %s did not end", strings.Join(args, " "))
		}
		mu.Lock()
		defer mu.Unlock()
		return screen.String(), cmd.ProcessState.ExitCode()
	}
}

// inSandbox is the output of a shell script run in sandbox id.
func inSandbox(t *testing.T, id, script string) string {
	t.Helper()
	return ok(t, "exec", id, "--", "sh", "-c", script)
}

// running lists the command lines of the sandbox's processes.
func running(t *testing.T, id string) string {
	t.Helper()
	return inSandbox(t, id, `for f in /proc/[0-9]*/cmdline; do tr '\0' ' ' < "$f"; echo; done 2>/dev/null`)
}

// TestHostileExecGivesNoTerminalToTheSandbox is issue 15's finding 3:
// `sandboxctl exec` from a terminal used to hand that terminal to the
// sandbox, and a child started with setsid kept reading it after the
// command ended (keystrokes, a password typed for sudo). Now the command
// gets a terminal of the sandbox's (or a pipe, where only stdout or
// stderr is a terminal), the daemon refuses a terminal as stdio, and
// everything the command started ends with it unless --detach.
func TestHostileExecGivesNoTerminalToTheSandbox(t *testing.T) {
	install(t)
	id := strings.TrimSpace(ok(t, "create", "-q", "web"))
	defer ctl(t, "", "destroy", id)

	// The control: while the command runs, a child it started with
	// setsid reads what the user types, through the sandbox's terminal.
	// (Through fd 3: sh gives a background job /dev/null as stdin.)
	master, wait := onPTY(t, "", "exec", id, "--", "sh", "-c", `exec 3<&0; setsid sh -c "head -n1 <&3 > /tmp/got" & sleep 2`)
	time.Sleep(time.Second)
	if _, err := master.Write([]byte("typed-while-running\r")); err != nil {
		t.Fatal(err)
	}
	if screen, code := wait(); code != 0 {
		t.Fatalf("exec on a terminal: exit %d: %q", code, screen)
	}
	if got := inSandbox(t, id, "cat /tmp/got"); got != "typed-while-running\n" {
		t.Fatalf("the control: a setsid child read %q from the sandbox's terminal while the command ran; want the line typed", got)
	}

	// After the command ended, what the user types reaches nothing in the
	// sandbox, also from a detached child that waited for it, and also
	// when only stdout and stderr are the terminal (which is readable).
	for _, c := range []struct{ stdin, script, file string }{
		// (The command waits until its children have left its process
		// group, which ends with it.)
		{"", `exec 3<&0; setsid sh -c "sleep 1; cat <&3 > /tmp/stolen" & sleep 0.2`, "/tmp/stolen"},
		{"from a pipe\n", `echo visible; setsid sh -c "sleep 1; cat <&1 > /tmp/stolen-1" & setsid sh -c "sleep 1; cat <&2 > /tmp/stolen-2" & sleep 0.2`, "/tmp/stolen-[12]"},
	} {
		master, wait := onPTY(t, c.stdin, "exec", "--detach", id, "--", "sh", "-c", c.script)
		screen, code := wait()
		if code != 0 || c.stdin != "" && !strings.Contains(screen, "visible") {
			t.Fatalf("exec --detach %q: exit %d, screen %q", c.script, code, screen)
		}
		time.Sleep(1500 * time.Millisecond) // the children wait for their second
		if _, err := master.Write([]byte("secret-typed-after\n")); err != nil {
			t.Fatal(err)
		}
		time.Sleep(500 * time.Millisecond)
		if got := inSandbox(t, id, "cat "+c.file+" 2>/dev/null; true"); strings.Contains(got, "secret") {
			t.Errorf("a child of %q read %q from the user's terminal after the command ended", c.script, got)
		}
	}

	// Without --detach, nothing the command started outlives it, also
	// what left its session; with it (the control), that stays.
	for _, detach := range []bool{false, true} {
		marker := "sleep 31"
		args := []string{"exec", id, "--", "sh", "-c", `setsid sleep 31 & setsid sh -c "sleep 31" & sleep 0.2`}
		if detach {
			marker, args = "sleep 32", []string{"exec", "--detach", id, "--", "sh", "-c", `setsid sleep 32 & sleep 0.2`}
		}
		_, wait := onPTY(t, "", args...)
		if screen, code := wait(); code != 0 {
			t.Fatalf("exec %v: exit %d: %q", args, code, screen)
		}
		left := strings.Contains(running(t, id), marker)
		if left != detach {
			t.Errorf("exec --detach=%v: a process the command started is left running: %v; want %v", detach, left, detach)
		}
	}

	// A D-Bus client that passes its terminal is refused. (The master is
	// held open: closed, the slave is a terminal hung up.)
	master, slave := openPTY(t)
	defer master.Close()
	defer slave.Close()
	c := newClient(t)
	null, w, collect := testbed.Capture(t)
	defer collect()
	object := dbus.ObjectPath("/org/sandboxd1/sandbox/" + id)
	err := c.conn.Object("org.sandboxd1", object).Call("org.sandboxd1.Sandbox.Exec", 0,
		[]string{"true"}, map[string]dbus.Variant{}, dbus.UnixFD(null.Fd()), dbus.UnixFD(slave.Fd()), dbus.UnixFD(w.Fd())).Err
	if err == nil || !strings.Contains(err.Error(), "stdout (descriptor 1) is a terminal") {
		t.Errorf("Exec with a terminal as stdout: %v; want it refused", err)
	}
}

// TestHostileExecRefusesAnonymousInodesAsStdio is issue 15's finding 11
// (its second half): a pidfd, an eventfd or a namespace given as stdio
// is refused, naming the descriptor; a pipe is taken (the control).
func TestHostileExecRefusesAnonymousInodesAsStdio(t *testing.T) {
	install(t)
	_, object := create(t)
	c := newClient(t)
	if out, how, status := c.exec(t, object, "echo", "through a pipe"); out != "through a pipe\n" || how != "exited" || status != 0 {
		t.Fatalf("the control, a pipe: %q %s %d", out, how, status)
	}
	pidfd, err := unix.PidfdOpen(os.Getpid(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(pidfd)
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(efd)
	ns, err := os.Open("/proc/self/ns/mnt")
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	null, w, collect := testbed.Capture(t)
	defer collect()
	n, o := dbus.UnixFD(null.Fd()), dbus.UnixFD(w.Fd())
	for _, tc := range []struct {
		stdio []dbus.UnixFD
		want  string
	}{
		{[]dbus.UnixFD{n, dbus.UnixFD(pidfd), o}, "stdout (descriptor 1) is a"},
		{[]dbus.UnixFD{n, o, dbus.UnixFD(efd)}, "stderr (descriptor 2) is an anonymous inode (anon_inode:[eventfd])"},
		{[]dbus.UnixFD{dbus.UnixFD(ns.Fd()), o, o}, "stdin (descriptor 0) is a namespace"},
	} {
		err := c.conn.Object("org.sandboxd1", dbus.ObjectPath(object)).Call("org.sandboxd1.Sandbox.Exec", 0,
			[]string{"echo", "nope"}, map[string]dbus.Variant{}, tc.stdio[0], tc.stdio[1], tc.stdio[2]).Err
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "not allowed as stdio") {
			t.Errorf("Exec with %v: %v; want it refused with %q", tc.stdio, err, tc.want)
		}
	}
}

// memberSandbox makes a member of group sandboxd and a sandbox of a
// project of its own.
func memberSandbox(t *testing.T, member string) string {
	t.Helper()
	uid, gid := groupMember(t, member)
	reconfigure(t, "")
	memberProject(t, "hostile-exec", uid, gid, map[string]string{"f": "f\n"})
	return strings.TrimSpace(okAs(t, member, "create", "--quiet", "hostile-exec"))
}

// asMember runs a shell script as member, as its login would.
func asMember(t *testing.T, member, script string) string {
	t.Helper()
	cmd := exec.Command("setpriv", "--reuid="+member, "--regid="+member, "--init-groups", "sh", "-c", script)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("%s as %s: %v", script, member, err)
	}
	return string(out)
}

// TestHostileExecOutputLimitWritesAsTheCaller is issue 15's finding 11:
// with --output-limit the sandbox's init copies the command's output to
// the caller's stdout, and used to write it as root with every
// capability. Files of /proc check the writer's rights at the write, so
// a member could set what only a privileged process may: its shell's
// timer slack (CAP_SYS_NICE for another process's), or its
// oom_score_adj below the floor (CAP_SYS_RESOURCE, where the machine
// grants root that). The write is now the member's own.
func TestHostileExecOutputLimitWritesAsTheCaller(t *testing.T) {
	const member = "hostile-exec"
	sb := memberSandbox(t, member)
	for _, c := range []struct{ file, before, value string }{
		{"timerslack_ns", "", "1234"},
		{"oom_score_adj", "echo 100 > /proc/$$/oom_score_adj;", "-1000"},
	} {
		// Controls: another process of root's sets it, one of the
		// member's cannot.
		script := c.before + ` sh -c "echo ` + c.value + ` > /proc/\$PPID/` + c.file + `" 2>/dev/null; read x < /proc/$$/` + c.file + `; echo $x`
		if got := strings.TrimSpace(testbed.MustRun(t, "sh", "-c", script)); got != c.value {
			t.Logf("root cannot set %s to %s here (%q): no test of it", c.file, c.value, got)
			continue
		}
		if got := strings.TrimSpace(asMember(t, member, script)); got == c.value {
			t.Fatalf("the control: the member set its shell's %s to %s from another process", c.file, got)
		}
		for _, limit := range []string{"", "--output-limit=1M"} {
			args := "exec " + limit + " " + sb + " -- echo " + c.value
			got := asMember(t, member, c.before+" read before < /proc/$$/"+c.file+"; "+ctlBin()+" "+args+" > /proc/$$/"+c.file+
				" 2>/dev/null; read after < /proc/$$/"+c.file+"; echo $before $after")
			if f := strings.Fields(got); len(f) != 2 || f[0] != f[1] {
				t.Errorf("sandboxctl %s > /proc/$$/%s as a member: %q before and after; want it unchanged", args, c.file, got)
			}
		}
	}
	// The output still reaches what the member may write.
	if out := okAs(t, member, "exec", "--output-limit=1M", sb, "--", "echo", "counted"); out != "counted\n" {
		t.Errorf("exec --output-limit to a pipe: %q", out)
	}
}

// TestHostileExecLooksForTheProgramAsTheCaller is issue 15's finding 12
// (lookPath): the init used to search PATH as root, so a program in a
// directory only root may enter was found for any caller. Now the
// caller gets "not found", as on the host; root (the control) finds it.
func TestHostileExecLooksForTheProgramAsTheCaller(t *testing.T) {
	const member = "hostile-exec"
	sb := memberSandbox(t, member)
	ok(t, "exec", "--root", sb, "--", "sh", "-c",
		`mkdir -p /opt/rootonly && printf '#!/bin/sh\necho found\n' > /opt/rootonly/hidden-prog && chmod 755 /opt/rootonly/hidden-prog && chmod 700 /opt/rootonly`)
	path := "PATH=/opt/rootonly:/usr/bin:/bin"
	if out := ok(t, "exec", "--root", "-e", path, sb, "--", "hidden-prog"); out != "found\n" {
		t.Fatalf("the control: root running hidden-prog from PATH: %q", out)
	}
	_, errOut, code := ctlAs(t, member, "exec", "-e", path, sb, "--", "hidden-prog")
	if code == 0 || !strings.Contains(errOut, "hidden-prog: not found") {
		t.Errorf("a member running hidden-prog, in a directory of PATH only root may enter: exit %d, %q; want not found", code, errOut)
	}
	if out := okAs(t, member, "exec", "-e", path, sb, "--", "cat", "f"); out != "f\n" {
		t.Errorf("a member running cat with that PATH: %q", out)
	}
}
