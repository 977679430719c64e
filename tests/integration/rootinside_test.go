package integration

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/tests/testbed"
)

// Issue 17's "Must hold", as the README's unprivileged agent would meet
// it: a regular user in group sandboxd, listed as a user of project web,
// runs as root in its own sandbox; the host sees none of it.

// rootAgent is that agent. A regular user (uid 1000 and up): the daemon's
// id map treats uids below 1000 as system accounts, mapped as root's.
const rootAgent = "sbroot-agent"

// regularMember is groupMember for a regular (non-system) user: it makes,
// once per testbed, group sandboxd and user name in it, and returns the
// user's uid and gid.
func regularMember(t *testing.T, name string) (uint32, uint32) {
	t.Helper()
	if _, err := user.LookupGroup("sandboxd"); err != nil {
		testbed.MustRun(t, "groupadd", "--system", "sandboxd")
	}
	if _, err := user.Lookup(name); err != nil {
		testbed.MustRun(t, "useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", "--groups", "sandboxd", name)
	}
	// The bus resolves the policy's group when it reads it.
	testbed.MustRun(t, "busctl", "call", "org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus", "ReloadConfig")
	u, err := user.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if uid < 1000 {
		t.Fatalf("user %s has uid %d; want a regular user's (1000 and up)", name, uid)
	}
	return uint32(uid), uint32(gid)
}

// rootInsideSetup makes rootAgent and lists it as a user of project web
// (whose directory is root's); the daemon restarts to resolve the group.
func rootInsideSetup(t *testing.T) (*testbed.Info, uint32, uint32) {
	t.Helper()
	tb := install(t)
	uid, gid := regularMember(t, rootAgent)
	reconfigure(t, fmt.Sprintf("users = [%q]\n", rootAgent)) // goes into web, the last [[project]]
	return tb, uid, gid
}

// webFile puts a file into project web on the host, owned uid:gid with
// mode, before a sandbox is made of it; it is removed at the test's end.
func webFile(t *testing.T, tb *testbed.Info, name string, data []byte, uid, gid uint32, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(tb.Btrfs.Project, name)
	if err := os.WriteFile(p, data, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(p, int(uid), int(gid)); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(p) })
	return p
}

// webDeb builds package pkg, version 1.0, of one file (an absolute path)
// saying "hello from a package", for why (its description), and puts it
// into project web as webFile does, under a name of its own, returned.
func webDeb(t *testing.T, tb *testbed.Info, pkg, file, why string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), pkg)
	for p, text := range map[string]string{
		"DEBIAN/control": "Package: " + pkg + "\nVersion: 1.0\nArchitecture: all\nMaintainer: sandboxd tests <tests@example.invalid>\nDescription: a file for " + why + "\n",
		file[1:]:         "hello from a package\n",
	} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	testbed.MustRun(t, "dpkg-deb", "--root-owner-group", "-b", dir, dir+".deb")
	deb, err := os.ReadFile(dir + ".deb")
	if err != nil {
		t.Fatal(err)
	}
	name := pkg + "-" + suffix() + ".deb"
	webFile(t, tb, name, deb, 0, 0, 0o644)
	return name
}

// agentSandbox makes a sandbox of web as rootAgent, destroyed at the end.
func agentSandbox(t *testing.T) string {
	t.Helper()
	id := strings.TrimSpace(okAs(t, rootAgent, "create", "--quiet", "web"))
	t.Cleanup(func() { ctl(t, "", "destroy", id) })
	return id
}

// agentSh runs script with sh in sandbox id as rootAgent, as root inside
// when root is set.
func agentSh(t *testing.T, id string, root bool, script string) (string, string, int) {
	t.Helper()
	args := []string{"exec"}
	if root {
		args = append(args, "--root")
	}
	return ctlAs(t, rootAgent, append(args, id, "--", "sh", "-c", script)...)
}

func agentShOK(t *testing.T, id string, root bool, script string) string {
	t.Helper()
	out, errOut, code := agentSh(t, id, root, script)
	if code != 0 {
		t.Fatalf("as %s (root inside: %v): %s: exit %d: %s%s", rootAgent, root, script, code, out, errOut)
	}
	return out
}

// ownerOf is a file's uid, gid and permission bits on the host.
func ownerOf(t *testing.T, p string) (uint32, uint32, uint32) {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		t.Fatal(err)
	}
	return st.Uid, st.Gid, st.Mode & 0o7777
}

func suffix() string { return strconv.FormatInt(time.Now().UnixNano(), 36) }

// The agent is root in its own sandbox and itself without --root: root
// edits /etc/hosts there (the agent alone may not); files show their real
// owners; the host's /etc/hosts is untouched; status and HostIDs name the
// sandbox's block of host ids.
func TestRootInsideAgentIsRootInItsOwnSandbox(t *testing.T) {
	tb, uid, gid := rootInsideSetup(t)
	hosts, err := os.ReadFile("/etc/hosts")
	if err != nil {
		t.Fatal(err)
	}
	rootName, agentName := "rootinside-root-"+suffix(), "rootinside-agent-"+suffix()
	webFile(t, tb, rootName, []byte("root's\n"), 0, 0, 0o644)
	webFile(t, tb, agentName, []byte("the agent's\n"), uid, gid, 0o644)
	id := agentSandbox(t)

	if got := strings.TrimSpace(agentShOK(t, id, false, "id -u")); got != strconv.Itoa(int(uid)) {
		t.Errorf("id -u without --root: %q; want the agent's uid %d", got, uid)
	}
	if got := strings.TrimSpace(agentShOK(t, id, true, "id -u")); got != "0" {
		t.Errorf("id -u with --root: %q; want 0", got)
	}
	// The control: the agent itself may not edit /etc/hosts.
	const line = "10.9.9.9 agent-test"
	if out, errOut, code := agentSh(t, id, false, "echo '"+line+"' >> /etc/hosts"); code == 0 || !strings.Contains(errOut, "Permission denied") {
		t.Errorf("the agent without --root appending to /etc/hosts: exit %d: %s%s; want Permission denied", code, out, errOut)
	}
	agentShOK(t, id, true, "echo '"+line+"' >> /etc/hosts")
	if out := agentShOK(t, id, false, "cat /etc/hosts"); !strings.Contains(out, line) {
		t.Errorf("/etc/hosts in the sandbox after root appended to it:\n%s", out)
	}
	if now, _ := os.ReadFile("/etc/hosts"); !bytes.Equal(now, hosts) {
		t.Errorf("the host's /etc/hosts changed:\n%s\nwas:\n%s", now, hosts)
	}

	// Real owners inside, with and without --root.
	for _, root := range []bool{false, true} {
		owners := map[string]string{}
		for _, l := range strings.Split(strings.TrimSpace(agentShOK(t, id, root, "ls -ln "+rootName+" "+agentName)), "\n") {
			if f := strings.Fields(l); len(f) >= 9 {
				owners[f[len(f)-1]] = f[2] + ":" + f[3]
			}
		}
		if owners[rootName] != "0:0" || owners[agentName] != fmt.Sprintf("%d:%d", uid, gid) {
			t.Errorf("ls -ln inside (root: %v): %v; want %s 0:0 and %s %d:%d", root, owners, rootName, agentName, uid, gid)
		}
	}

	// The block of host ids, over the bus and in status.
	prop := strings.Fields(testbed.MustRun(t, "busctl", "get-property", "org.sandboxd1", "/org/sandboxd1/sandbox/"+id, "org.sandboxd1.Sandbox", "HostIDs"))
	if len(prop) != 4 || prop[0] != "au" || prop[1] != "2" {
		t.Fatalf("HostIDs: %q; want au 2 FIRST LAST", prop)
	}
	first, _ := strconv.Atoi(prop[2])
	last, _ := strconv.Atoi(prop[3])
	if first < 524288 || last-first+1 != 65536 {
		t.Errorf("HostIDs: %d-%d; want 65,536 ids from 524288 on", first, last)
	}
	st := okAs(t, rootAgent, "status", id)
	want := fmt.Sprintf(`(?m)^IDs:\s+%d-%d on the host`, first, last)
	if !regexp.MustCompile(want).MatchString(st) {
		t.Errorf("status as the agent has no line matching %s:\n%s", want, st)
	}
}

// Root inside edits a root-owned project file the agent may not; the
// host's file changes only by promotion, and keeps root as owner and its
// mode.
func TestRootInsideEditsARootOwnedProjectFileThatKeepsItsOwner(t *testing.T) {
	tb, _, _ := rootInsideSetup(t)
	name := "rootinside-conf-" + suffix()
	host := webFile(t, tb, name, []byte("root's v1\n"), 0, 0, 0o644)
	id := agentSandbox(t)

	if out, errOut, code := agentSh(t, id, false, "echo agent v2 > "+name); code == 0 || !strings.Contains(errOut, "Permission denied") {
		t.Errorf("the agent without --root writing root's %s: exit %d: %s%s; want Permission denied", name, code, out, errOut)
	}
	agentShOK(t, id, true, "echo agent v2 > "+name)
	if out := agentShOK(t, id, false, "cat "+name+"; stat -c %u:%g:%a "+name); out != "agent v2\n0:0:644\n" {
		t.Errorf("%s inside after root's edit: %q; want agent v2, 0:0, 644", name, out)
	}
	if data, _ := os.ReadFile(host); string(data) != "root's v1\n" {
		t.Fatalf("the project's %s changed before any promotion: %q", name, data)
	}

	if out := okAs(t, rootAgent, "promote", id); !strings.Contains(out, "passed") {
		t.Errorf("promote as the agent:\n%s", out)
	}
	if data, _ := os.ReadFile(host); string(data) != "agent v2\n" {
		t.Errorf("the project's %s after the promotion: %q; want agent v2", name, data)
	}
	if u, g, m := ownerOf(t, host); u != 0 || g != 0 || m != 0o644 {
		t.Errorf("the project's %s after the promotion: %d:%d mode %o; want 0:0 644", name, u, g, m)
	}
}

// Root inside installs a local .deb with dpkg -i; the package and its
// files are the sandbox's, root's inside; the host has neither.
func TestRootInsideInstallsADebTheHostNeverSees(t *testing.T) {
	tb, _, _ := rootInsideSetup(t)
	const pkg = "sbroot-hello"
	file := "/usr/share/" + pkg + "/hello"
	if exec.Command("dpkg", "-s", pkg).Run() == nil {
		t.Fatalf("%s is installed on the host before the test", pkg)
	}
	debName := webDeb(t, tb, pkg, file, "issue 17's test")
	id := agentSandbox(t)

	// The control: the agent itself cannot install it.
	if out, errOut, code := agentSh(t, id, false, "dpkg -i "+debName); code == 0 {
		t.Errorf("dpkg -i as the agent without --root: exit 0: %s%s; want a refusal", out, errOut)
	}
	agentShOK(t, id, true, "dpkg -i "+debName)
	if out := agentShOK(t, id, false, "dpkg -s "+pkg); !strings.Contains(out, "Status: install ok installed") {
		t.Errorf("dpkg -s %s inside after dpkg -i:\n%s", pkg, out)
	}
	if out := agentShOK(t, id, false, "stat -c %u:%g "+file+"; cat "+file); out != "0:0\nhello from a package\n" {
		t.Errorf("%s inside: %q; want root's, with the package's text", file, out)
	}
	if out, err := exec.Command("dpkg", "-s", pkg).CombinedOutput(); err == nil {
		t.Errorf("dpkg -s %s on the host says it is installed:\n%s", pkg, out)
	}
	if _, err := os.Lstat(file); !os.IsNotExist(err) {
		t.Errorf("%s on the host: %v; want it absent", file, err)
	}
}

// Root inside cannot read what is hidden, signal a host process, write
// into the host's /etc through /proc/PID/root, or give the host a setuid
// file by promotion.
func TestRootInsideCannotReachTheHost(t *testing.T) {
	tb, _, _ := rootInsideSetup(t)
	// A root-only secret under /var/log, hidden from sandboxes by default.
	secretText := "sandboxd secret " + suffix()
	secret := "/var/log/sandboxd-secret-" + suffix()
	if err := os.WriteFile(secret, []byte(secretText), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(secret) })
	if data, err := os.ReadFile(secret); err != nil || string(data) != secretText {
		t.Fatalf("the control: root outside reads %s: %q, %v", secret, data, err)
	}
	id := agentSandbox(t)

	out, errOut, code := agentSh(t, id, true, "cat "+secret+"; ls -a /var/log")
	if strings.Contains(out, secretText) || strings.Contains(out, filepath.Base(secret)) {
		t.Errorf("root inside read or saw the hidden %s: exit %d: %s%s", secret, code, out, errOut)
	}

	// A host process: the daemon. The control: it is alive, as kill -0 outside says.
	pid := mainPID(t)
	if err := unix.Kill(pid, 0); err != nil {
		t.Fatalf("the control: kill -0 %d outside: %v", pid, err)
	}
	if out, errOut, code := agentSh(t, id, true, fmt.Sprintf("kill -0 %d", pid)); code == 0 || !strings.Contains(errOut, "No such process") {
		t.Errorf("kill -0 of the daemon (host pid %d) as root inside: exit %d: %s%s; want No such process", pid, code, out, errOut)
	}

	// /proc/self/root and /proc/1/root are the sandbox's own root (the
	// control: through self the write works): what is written there stays
	// in it, or is refused.
	for _, via := range []string{"/proc/self/root", "/proc/1/root"} {
		escape := "/etc/sandboxd-escape-" + suffix()
		t.Cleanup(func() { os.Remove(escape) })
		out, errOut, code := agentSh(t, id, true, "echo escaped > "+via+escape+" && cat "+escape)
		switch {
		case code != 0 && via == "/proc/self/root":
			t.Errorf("the control: writing through %s as root inside: exit %d: %s%s", via, code, out, errOut)
		case code != 0:
			t.Logf("writing through %s as root inside was refused: exit %d: %s%s", via, code, out, errOut)
		case out != "escaped\n":
			t.Errorf("a file written through %s inside: %q; want it in the sandbox's %s", via, out, escape)
		}
		if _, err := os.Lstat(escape); !os.IsNotExist(err) {
			t.Errorf("root inside wrote %s on the host through %s (%v)", escape, via, err)
		}
	}

	// A setuid-root file made inside: the bit is set there (the control),
	// the host never gets it.
	suid := "rootinside-suid-" + suffix()
	host := filepath.Join(tb.Btrfs.Project, suid)
	t.Cleanup(func() { os.Remove(host) })
	if got := agentShOK(t, id, true, "cp /bin/true "+suid+" && chmod 4755 "+suid+" && stat -c %u:%a "+suid); got != "0:4755\n" {
		t.Fatalf("the control: a setuid file made by root inside is %q; want 0:4755", got)
	}
	out, errOut, code = ctlAs(t, rootAgent, "promote", id)
	if st, err := os.Lstat(host); err == nil && st.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 {
		t.Errorf("the host's project has a set-id file %s (%v) after the promotion: exit %d: %s%s", suid, st.Mode(), code, out, errOut)
	}
	if code == 0 {
		t.Logf("the promotion of a setuid file passed (bit stripped): %s", out)
	} else if code != 4 || !strings.Contains(errOut, suid+" (setuid)") {
		t.Errorf("promoting a setuid file: exit %d: %s%s; want exit 4 naming %s (setuid), or the bit stripped", code, out, errOut, suid)
	}
}
