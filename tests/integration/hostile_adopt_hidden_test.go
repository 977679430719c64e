package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/tests/testbed"
)

// A holder the adoption's walk did not see: it read each process's
// /proc/PID/cwd, root, fd and maps, which are its main thread's. A
// process whose main thread exited alone (exit(2), not exit_group) shows
// nothing there while its other threads work in the directory and hold
// its files; a thread with a working directory of its own (unshare
// CLONE_FS) is not in /proc/PID/cwd. Neither takes any privilege: any
// user who can read the directory could keep using it unseen while root
// copied and switched it.

// A test binary started with testbed.HiddenHolderEnv becomes such a
// holder (testbed.HideHolder, holding DIR/index.html), before TestMain.
func init() {
	if mode, dir, ready, ok := testbed.HiddenHolderAsked(); ok {
		testbed.HideHolder(mode, dir, "index.html", ready)
	}
}

// threadCwds is the working directories of pid's threads, and pid's own.
func threadCwds(pid int) (own string, threads []string) {
	own, _ = os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid))
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	for _, task := range tasks {
		cwd, _ := os.Readlink(fmt.Sprintf("/proc/%d/task/%s/cwd", pid, task.Name()))
		threads = append(threads, cwd)
	}
	return own, threads
}

// TestHostileAdoptHolderHiddenInAThread: a member's process working in
// the directory through a thread /proc/PID does not show keeps it from
// being adopted, as any holder does.
func TestHostileAdoptHolderHiddenInAThread(t *testing.T) {
	install(t)
	const member, dir = "hostile-hidden", "/srv/hostile-hidden"
	groupMember(t, member)
	os.RemoveAll(dir)
	plainTree(t, dir)
	t.Cleanup(func() { ctl(t, "", "project", "release", "hidden"); os.RemoveAll(dir) })
	bin, binDir := memberBinary(t)
	for _, mode := range []string{"exited-leader", "thread-cwd"} {
		ready := filepath.Join(binDir, "ready-"+mode)
		cmd := memberReexec(bin, member, testbed.HiddenHolderEnv(mode, dir, ready), "-test.run=^$")
		cmd.Dir = "/"
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		stop := func() { cmd.Process.Kill(); cmd.Wait() }
		t.Cleanup(stop)
		pid := cmd.Process.Pid // setpriv execs the holder: the same pid
		// Ready once it says so, and once an exited leader's links are gone.
		var own string
		var threads []string
		for end := time.Now().Add(60 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			own, threads = threadCwds(pid)
			if exists(ready) && (mode != "exited-leader" || own == "") {
				break
			}
			if time.Now().After(end) {
				t.Fatalf("the hidden holder (%s) was not ready within 60 s: cwd %q, threads' %q", mode, own, threads)
			}
		}
		// The attack: /proc/PID/cwd is not the directory; a thread's is.
		if own == dir || !strings.Contains(strings.Join(threads, "\n")+"\n", dir+"\n") {
			t.Fatalf("%s: pid %d works in %q, its threads in %q: not the attack", mode, pid, own, threads)
		}
		_, errOut, code := ctl(t, "", "project", "adopt", "hidden", dir)
		switch {
		case code == 0:
			t.Errorf("%s: %s was adopted while pid %d of %s worked in it through a thread (%q)", mode, dir, pid, member, threads)
			ctl(t, "", "project", "release", "hidden")
		case code != 5 || !regexp.MustCompile(fmt.Sprintf(`in use by pid %d \(holder\)`, pid)).MatchString(errOut):
			t.Errorf("%s: adopting %s: exit %d: %s; want exit 5, in use by pid %d (holder)", mode, dir, code, errOut, pid)
		}
		stop()
	}
	// Gone, they held it back no longer: what refused it was they.
	if _, errOut, code := ctl(t, "", "project", "adopt", "hidden", dir); code != 0 {
		t.Errorf("adopting %s once its hidden holders were gone: exit %d: %s", dir, code, errOut)
	}
}
