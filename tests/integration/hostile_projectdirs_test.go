package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/tests/testbed"
)

// An attacker's review of several directories per project, the state
// directories of a sandbox in a user namespace and the user namespace
// made by a thread with the sandbox's root's host uid. Each test first
// shows that the action works where it should (the control), then that
// it harms nothing it should not.

// initOf is the host pid of sandbox id's init (pid 1 of its namespace).
func initOf(t *testing.T, id string) int {
	t.Helper()
	for _, pid := range scopePIDs(t, "sandbox-"+id+".scope") {
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(status), "\n") {
			if f := strings.Fields(line); len(f) > 2 && f[0] == "NSpid:" && f[len(f)-1] == "1" {
				return pid
			}
		}
	}
	t.Fatalf("no init (pid 1 of its namespace) in sandbox %s's scope", id)
	return 0
}

// hostRootOf is the host uid of the root of process pid's user namespace.
func hostRootOf(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/uid_map", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "0" {
			n, err := strconv.Atoi(f[1])
			if err == nil && n != 0 {
				return n
			}
		}
	}
	t.Fatalf("sandbox init %d has no user namespace of its own: %q", pid, b)
	return 0
}

// asUID runs argv as host uid (and gid) uid, with no supplementary group
// and no capability: a process of a user the host's user database knows
// only through NSS (LDAP, sssd), which /etc/passwd does not list.
func asUID(uid int, argv ...string) (string, error) {
	id := strconv.Itoa(uid)
	out, err := exec.Command("setpriv", append([]string{"--reuid=" + id, "--regid=" + id, "--clear-groups"}, argv...)...).CombinedOutput()
	return string(out), err
}

// TestHostileHostUIDOfTheSandboxRootGetsNoPowerOverIt: a sandbox's user
// namespace is made by a thread with its root's host uid (the first of
// its block), which so owns it: the kernel gives the owner, from the
// host's namespace, every capability in it. No account may have that
// uid: a block whose first id is an account's (in the files, or known
// to the name service only: LDAP, sssd) is skipped. An account made with
// the uid a sandbox's namespace was owned by gets no power over the next.
func TestHostileHostUIDOfTheSandboxRootGetsNoPowerOverIt(t *testing.T) {
	install(t)
	probe := strings.TrimSpace(ok(t, "create", "--quiet", "web"))
	taken := hostRootOf(t, initOf(t, probe))
	ok(t, "destroy", probe)
	const name = "hostile-owner"
	testbed.MustRun(t, "useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", "--uid", strconv.Itoa(taken), name)
	t.Cleanup(func() { _ = exec.Command("userdel", name).Run() })

	id := strings.TrimSpace(ok(t, "create", "--quiet", "web"))
	t.Cleanup(func() { ctl(t, "", "destroy", id) })
	ok(t, "exec", "--root", id, "--", "sh", "-c", "umask 077; echo s3cret > /tmp/secret")
	pid := initOf(t, id)
	secret := fmt.Sprintf("/proc/%d/root/tmp/secret", pid)
	if b, err := os.ReadFile(secret); err != nil || string(b) != "s3cret\n" {
		t.Fatalf("host root reading %s: %q, %v", secret, b, err)
	}
	if owner := hostRootOf(t, pid); owner == taken {
		t.Fatalf("sandbox %s's namespace is owned by uid %d, account %s's", id, owner, name)
	}
	if out, err := asUID(taken, "cat", secret); err == nil {
		t.Errorf("account %s (uid %d) read sandbox %s's root-only /tmp/secret through %s: %q", name, taken, id, secret, out)
	}
	if out, err := asUID(taken, "nsenter", "-t", strconv.Itoa(pid), "-U", "-m", "true"); err == nil {
		t.Errorf("account %s (uid %d) entered sandbox %s's namespaces: %q", name, taken, id, out)
	}
}

// TestHostileStateDirectoriesCannotStopOthersSandboxes: the daemon walks
// /var/lib, /var/cache and /var/spool for directories a sandbox may not
// read and sends each, by name, in the init's spec (one datagram). A
// service account whose state directory others may read (Debian's
// /var/lib/postgresql is 0755 postgres) makes 500 directories of 0700
// with long names there: every sandbox in a user namespace of any other
// owner must still be made.
func TestHostileStateDirectoriesCannotStopOthersSandboxes(t *testing.T) {
	install(t)
	const account = "hostile-sdsvc"
	if _, err := exec.Command("id", account).Output(); err != nil {
		testbed.MustRun(t, "useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", account)
	}
	dir := "/var/lib/" + account
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	testbed.MustRun(t, "chown", account+":", dir)
	t.Cleanup(func() { os.RemoveAll(dir) })

	// The control: a sandbox in a user namespace is made.
	id, errOut, code := ctl(t, "", "create", "--quiet", "web")
	if code != 0 {
		t.Fatalf("a create before the account's directories: exit %d: %s", code, errOut)
	}
	ctl(t, "", "destroy", strings.TrimSpace(id))

	script := `set -e; n=$(printf '%0200d' 0 | tr 0 '<'); mkdir -m 0755 -p "$1/$n/$n"
for i in $(seq 500); do mkdir -m 0700 "$1/$n/$n/$n$i"; done`
	if out, err := exec.Command("setpriv", "--reuid="+account, "--regid="+account, "--clear-groups",
		"sh", "-c", script, "sh", dir).CombinedOutput(); err != nil {
		t.Fatalf("the account making its directories: %v: %s", err, out)
	}
	time.Sleep(11 * time.Second) // past the walk's cache (10 s per owner)

	id, errOut, code = ctl(t, "", "create", "--quiet", "web")
	if code != 0 {
		t.Errorf("once service account %s made 500 directories in its own, a sandbox (of root) cannot be made: exit %d: %s",
			account, code, strings.TrimSpace(errOut))
		return
	}
	ctl(t, "", "destroy", strings.TrimSpace(id))
}

// TestHostileHolderNamedLikeAServiceIsNotRestarted: an adoption with
// --restart-units stops and starts the services whose processes use the
// directory, named by the last element of each process's cgroup. A user
// with a manager of its own names a unit of its as a system service and
// leaves it working in the directory (any user may enter a 0755 one):
// the admin's adoption must not stop and start that system service.
func TestHostileHolderNamedLikeAServiceIsNotRestarted(t *testing.T) {
	install(t)
	const user, victim = "hostile-holder", "hostile-victim.service"
	if _, err := exec.Command("id", user).Output(); err != nil {
		testbed.MustRun(t, "useradd", "--create-home", "--shell", "/bin/sh", user)
	}
	uid := strings.TrimSpace(testbed.MustRun(t, "id", "-u", user))
	dir := "/srv/hostile-held"
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	unitFile := filepath.Join("/run/systemd/system", victim)
	if err := os.WriteFile(unitFile, []byte("[Service]\nExecStart=/bin/sleep 600\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	testbed.MustRun(t, "systemctl", "daemon-reload")
	testbed.MustRun(t, "systemctl", "start", victim)
	testbed.MustRun(t, "loginctl", "enable-linger", user)
	t.Cleanup(func() {
		_ = exec.Command("loginctl", "disable-linger", user).Run()
		_ = exec.Command("systemctl", "stop", "user@"+uid+".service", victim).Run()
		os.Remove(unitFile)
		_ = exec.Command("systemctl", "daemon-reload").Run()
		ctl(t, "", "project", "release", "hostile-held")
		os.RemoveAll(dir)
	})
	bus := "/run/user/" + uid + "/bus"
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		if _, err := os.Stat(bus); err == nil {
			break
		}
	}
	userRun := exec.Command("setpriv", "--reuid="+user, "--regid="+user, "--init-groups",
		"env", "XDG_RUNTIME_DIR=/run/user/"+uid, "DBUS_SESSION_BUS_ADDRESS=unix:path="+bus,
		"systemd-run", "--user", "--unit="+victim, "-p", "WorkingDirectory="+dir, "/bin/sleep", "600")
	if out, err := userRun.CombinedOutput(); err != nil {
		t.Fatalf("user %s starting its own %s: %v: %s", user, victim, err, out)
	}
	before := strings.TrimSpace(testbed.MustRun(t, "systemctl", "show", "-P", "MainPID", victim))

	// The control: the user's process holds the directory; systemd says
	// it is of the user's manager (its cgroup's name, hostile-victim.service,
	// is the user's).
	fails(t, 5, `\(sleep\) of unit user@`+uid+`\.service`, "project", "adopt", "hostile-held", dir)

	fails(t, 5, `is of user@`+uid+`\.service, a delegated subtree`, "project", "adopt", "--restart-units", "hostile-held", dir)
	after := strings.TrimSpace(string(must1(exec.Command("systemctl", "show", "-P", "MainPID", victim).Output())))
	if after != before {
		t.Errorf("the system's %s (pid %s) was stopped and started (now pid %q) for an adoption held by user %s's unit of that name",
			victim, before, after, user)
	}
}
