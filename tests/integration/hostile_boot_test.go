package integration

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/tests/testbed"
)

// A booted sandbox (issue 18) as an attacker uses it: its root starts any
// program as a service of the sandbox's systemd, which runs it as root of
// a nested user namespace with every capability there, no no_new_privs
// and the boot filter (mounts, namespaces). Each test first shows that
// the action works where it should, then that it harms nothing outside
// the sandbox: another sandbox, the daemon's other calls, the host.

// svc runs script with sh as a service of booted sandbox id's systemd and
// returns what it printed.
func svc(t *testing.T, id, script string) string {
	t.Helper()
	out, errOut, _ := ctl(t, "", "exec", "--root", id, "--", "systemd-run", "--quiet", "--wait", "--pipe", "--collect", "sh", "-c", script)
	return out + errOut
}

// holderScript holds, in children forked one after another (each may
// hold as many descriptors as its limit lets it), kernel objects of one
// kind (argv[1]: "inotify" instances or "cgroupns" namespaces) until the
// kernel refuses one or 16 children hold theirs, writes "HELD ERRNO" to
// /run/held.KIND and waits to be stopped.
const holderScript = `import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
kind = sys.argv[1]
def one():
    if kind == "inotify":
        return libc.inotify_init1(0)
    if libc.unshare(0x02000000) != 0:  # CLONE_NEWCGROUP
        return -1
    return os.open("/proc/self/ns/cgroup", os.O_RDONLY)
r, w = os.pipe()
held, err = 0, 0
for _ in range(16):
    if os.fork() == 0:
        n, e = 0, 0
        while n < 19000:
            if one() < 0:
                e = ctypes.get_errno()
                break
            n += 1
        os.write(w, b"%d %d\n" % (n, e))
        time.sleep(600)
        os._exit(0)
    n, e = map(int, os.read(r, 64).split())
    held += n
    if e:
        err = e
        break
with open("/run/held." + kind, "w") as f:
    f.write("%d %d\n" % (held, err))
time.sleep(600)
`

// hold starts holderScript for kind as service unit of booted sandbox
// id, stopped at the end of the test, and returns what it holds once it
// holds it, and the errno of the refusal that stopped it (0: none).
func hold(t *testing.T, id, kind string) (int, int) {
	t.Helper()
	if _, errOut, code := ctl(t, holderScript, "exec", "--root", id, "--", "sh", "-c", "cat >/run/holder.py"); code != 0 {
		t.Fatalf("writing the holder: %s", errOut)
	}
	unit := "holder-" + kind
	t.Cleanup(func() { ctl(t, "", "exec", "--root", id, "--", "systemctl", "stop", unit) })
	ok(t, "exec", "--root", id, "--", "systemd-run", "--quiet", "--collect", "--unit="+unit,
		"-p", "LimitNOFILE=20000", "-p", "TasksMax=infinity", "python3", "/run/holder.py", kind)
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		out, _, code := ctl(t, "", "exec", "--root", id, "--", "cat", "/run/held."+kind)
		if f := strings.Fields(out); code == 0 && len(f) == 2 {
			n, _ := strconv.Atoi(f[0])
			e, _ := strconv.Atoi(f[1])
			return n, e
		}
	}
	t.Fatalf("the %s holder in sandbox %s did not report within 60 s", kind, id)
	return 0, 0
}

// sandboxCgroups are the host's cgroup directories of sandbox id, in
// every hierarchy.
func sandboxCgroups(t *testing.T, id string) []string {
	t.Helper()
	out := testbed.MustRun(t, "find", "/sys/fs/cgroup", "-maxdepth", "5", "-type", "d", "-name", "*"+id+"*")
	return strings.Fields(out)
}

// removeCgroupTree removes dir and every cgroup below it, however deep
// (by descriptors: a path deeper than PATH_MAX cannot be named), so that
// what a test left does not outlive it on the machine (the testbed's
// cgroups are the machine's).
func removeCgroupTree(dir string) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	err = removeChildren(fd)
	unix.Close(fd)
	if err != nil {
		return err
	}
	return unix.Rmdir(dir)
}

func removeChildren(fd int) error {
	dup, err := unix.Dup(fd) // the File below closes its own
	if err != nil {
		return err
	}
	d := os.NewFile(uintptr(dup), "cgroup")
	ents, err := d.ReadDir(-1)
	d.Close()
	if err != nil {
		return err
	}
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		c, err := unix.Openat(fd, e.Name(), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		err = removeChildren(c)
		unix.Close(c)
		if err != nil {
			return err
		}
		if err := unix.Unlinkat(fd, e.Name(), unix.AT_REMOVEDIR); err != nil {
			return err
		}
	}
	return nil
}

// The payload cgroup is the sandbox's systemd's to divide; what it makes
// there must not outlive the sandbox. A chain of cgroups deeper than
// PATH_MAX could not be removed by path (systemd's trim of the stopped
// scope would fail), and would stay in the host's kernel after destroy:
// payload/'s depth is bounded (root's cgroup.max.depth), and a service
// that tries makes a few levels, then is refused.
func TestABootedSandboxLeavesNoCgroupsBehindItsDestroy(t *testing.T) {
	install(t)
	id, _ := bootSandbox(t, "web")
	t.Cleanup(func() {
		for _, d := range sandboxCgroups(t, id) {
			if err := removeCgroupTree(d); err != nil && !errors.Is(err, unix.ENOENT) {
				t.Logf("removing what sandbox %s left at %s: %v", id, d, err)
			}
		}
	})
	out := svc(t, id, `python3 -c '
import os
os.chdir("/sys/fs/cgroup")
n = 0
try:
    while n < 2100:
        os.mkdir("d"); os.chdir("d"); n += 1
except OSError as e:
    print("refused", e.errno)
print("depth", n)
'`)
	var depth int
	if _, err := fmt.Sscanf(out[strings.Index(out, "depth "):], "depth %d", &depth); err != nil || depth < 3 {
		t.Fatalf("a service could not make cgroups in its systemd's subtree (%q): the check below would prove nothing", out)
	}
	if depth >= 2100 || !strings.Contains(out, "refused") {
		t.Errorf("a service nested %d cgroups in its systemd's subtree (%q); want a bound", depth, out)
	}
	if len(sandboxCgroups(t, id)) == 0 {
		t.Fatal("found no cgroup of the sandbox while it lives: the check below would prove nothing")
	}
	ok(t, "destroy", id)
	var left []string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if left = sandboxCgroups(t, id); len(left) == 0 {
			break
		}
	}
	if len(left) > 0 {
		t.Errorf("cgroups of booted sandbox %s left after destroy (its service nested 2100 cgroups):\n%s", id, strings.Join(left, "\n"))
	}
}

// SystemStatus runs the sandbox's own systemctl; the sandbox's root
// decides when (if ever) that ends. A status call must still answer, and
// must not hold one of its caller's few heavy-call slots for good: four
// of them would refuse the caller's file, diff and promotion calls on
// every sandbox.
func TestABootedSandboxsStatusCannotHoldTheCallersCalls(t *testing.T) {
	install(t)
	id, _ := bootSandbox(t, "web")
	other := strings.TrimSpace(ok(t, "create", "--quiet", "web"))
	t.Cleanup(func() { ctl(t, "", "destroy", other) })

	if state, _ := statusSystem(t, id); state != "running" {
		t.Fatalf("status of a fresh booted sandbox: System %q; want running", state)
	}
	if got := ok(t, "cat", other, "/etc/hostname"); strings.TrimSpace(got) == "" {
		t.Fatal("cat of another sandbox's /etc/hostname printed nothing: the check below would prove nothing")
	}

	rootSh(t, id, `mv /usr/bin/systemctl /usr/bin/systemctl.real && printf '#!/bin/sh\nexec sleep 100000\n' >/usr/bin/systemctl && chmod 755 /usr/bin/systemctl`)
	hung := 0
	done := make(chan error, 4)
	for range 4 {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			done <- exec.CommandContext(ctx, ctlBin(), "status", id).Run()
		}()
	}
	for range 4 {
		if err := <-done; err != nil && strings.Contains(err.Error(), "killed") {
			hung++
		}
	}
	if hung > 0 {
		t.Errorf("%d of 4 `sandboxctl status` of a booted sandbox whose systemctl never ends did not answer within 15 s", hung)
	}
	if out, errOut, code := ctl(t, "", "cat", other, "/etc/hostname"); code != 0 {
		t.Errorf("cat in another sandbox after those status calls (their clients gone): exit %d, %q %q", code, out, errOut)
	}
}

// Namespaces are counted, at the host's level, against the user that
// made the user namespace holding them: the daemon (host root) made the
// sandbox's. A service's namespaces must not use up the host root's
// (96364 of each kind on this machine, for all of root's processes and
// every sandbox): then no booted sandbox starts (its systemd takes a
// cgroup namespace), nor, for the other kinds (uts, mnt, ipc, net),
// any sandbox or host service that takes one. Cgroup namespaces are
// used here, as the machine's own services take none.
func TestABootedSandboxCannotSpendTheHostRootsNamespaces(t *testing.T) {
	install(t)
	id, _ := bootSandbox(t, "web")
	first, errOut, code := ctl(t, "", "create", "--quiet", "--boot", "web")
	if code != 0 {
		t.Fatalf("a second booted sandbox could not be made before the attack: %s", errOut)
	}
	ok(t, "destroy", strings.TrimSpace(first))

	held, errno := hold(t, id, "cgroupns")
	t.Logf("a service of sandbox %s holds %d cgroup namespaces (refused with errno %d)", id, held, errno)
	out, errOut, code := ctl(t, "", "create", "--quiet", "--boot", "web")
	if code == 0 {
		ctl(t, "", "destroy", strings.TrimSpace(out))
	} else {
		t.Errorf("while a booted sandbox's service holds %d cgroup namespaces, another booted sandbox cannot be made: exit %d, %s", held, code, errOut)
	}
}

// inotify instances are counted the same way, and the host root has 128
// on a Debian host (max_inotify_instances), for all of its processes:
// each booted sandbox's systemd already takes three. A service must not
// take the rest, leaving the host's root (its systemd's path units,
// journald, udev) without.
func TestABootedSandboxCannotSpendTheHostRootsInotifyInstances(t *testing.T) {
	install(t)
	id, _ := bootSandbox(t, "web")
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC)
	if err != nil {
		t.Fatalf("the host's root cannot make an inotify instance before the attack: %v", err)
	}
	unix.Close(fd)

	held, errno := hold(t, id, "inotify")
	t.Logf("a service of sandbox %s holds %d inotify instances (refused with errno %d)", id, held, errno)
	fd, err = unix.InotifyInit1(unix.IN_CLOEXEC)
	if err != nil {
		t.Errorf("while a booted sandbox's service holds %d inotify instances, the host's root cannot make one: %v", held, err)
	} else {
		unix.Close(fd)
	}
}

// The init leaves its own /proc (of its pid namespace) unmasked in a
// booted sandbox, under the masked one of systemd's. Neither a service,
// which may unmount systemd's, nor a command once systemd has ended
// (commands then run in the init's namespaces) may see it: the init
// itself, and /proc's files every other sandbox masks (kallsyms).
func TestABootedSandboxsProcStaysMasked(t *testing.T) {
	install(t)
	id, _ := bootSandbox(t, "web")
	if got := strings.TrimSpace(rootSh(t, id, "wc -c </proc/kallsyms; cat /proc/1/comm")); got != "0\nsystemd" {
		t.Fatalf("a command of a booted sandbox sees /proc/kallsyms's size and pid 1 as %q; want 0 (masked) and systemd", got)
	}
	out := svc(t, id, `mount -t tmpfs probe /mnt && umount -l /mnt && echo unmounted-own
		umount -l /proc; echo "kallsyms $(wc -c </proc/kallsyms)"; echo "pid1 $(tr '\0' ' ' </proc/1/cmdline)"`)
	if !strings.Contains(out, "unmounted-own") {
		t.Fatalf("a service could not mount and unmount a tmpfs of its own (%q): the check below would prove nothing", out)
	}
	// (It sees the init's pid namespace then, the init among its
	// processes: no more than a command of a sandbox not booted does.)
	if !strings.Contains(out, "kallsyms 0") {
		t.Errorf("a service that unmounted its systemd's /proc sees the init's, unmasked: %q", out)
	}

	ctl(t, "", "exec", "--root", id, "--", "systemctl", "poweroff")
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if state, _ := statusSystem(t, id); state == "offline" {
			break
		}
	}
	got := rootSh(t, id, `echo "kallsyms $(wc -c </proc/kallsyms)"; echo "pid1 $(tr '\0' ' ' </proc/1/cmdline)"`)
	if !strings.Contains(got, "kallsyms 0") {
		t.Errorf("once the sandbox's systemd has ended, its commands see an unmasked /proc: %q", got)
	}
}
