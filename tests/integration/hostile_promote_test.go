package integration

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/tests/testbed"
)

// groupMember makes (once per testbed: its root is a throw-away overlay)
// group sandboxd and a user in it, and returns the user's uid and gid.
// The daemon resolves the group when it starts: call reconfigure after.
func groupMember(t *testing.T, name string) (uint32, uint32) {
	t.Helper()
	if _, err := user.LookupGroup("sandboxd"); err != nil {
		testbed.MustRun(t, "groupadd", "--system", "sandboxd")
	}
	if _, err := user.Lookup(name); err != nil {
		testbed.MustRun(t, "useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", "--groups", "sandboxd", name)
	}
	// The bus resolves the policy's group when it reads it.
	testbed.MustRun(t, "busctl", "call", "org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus", "ReloadConfig")
	u, err := user.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return uint32(uid), uint32(gid)
}

// ctlAs runs sandboxctl as user name, with its groups (sandboxd among
// them), and returns stdout, stderr and the exit status.
func ctlAs(t *testing.T, name string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command("setpriv", append([]string{"--reuid=" + name, "--regid=" + name, "--init-groups", ctlBin()}, args...)...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("sandboxctl %s as %s: %v", strings.Join(args, " "), name, err)
	}
	return out.String(), errOut.String(), cmd.ProcessState.ExitCode()
}

func okAs(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, errOut, code := ctlAs(t, name, args...)
	if code != 0 {
		t.Fatalf("sandboxctl %s as %s: exit %d: %s%s", strings.Join(args, " "), name, code, out, errOut)
	}
	return out
}

// rootVictim makes a root-owned file, mode 0755, outside every project.
func rootVictim(t *testing.T) string {
	t.Helper()
	if err := os.MkdirAll("/srv", 0o755); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join("/srv", fmt.Sprintf("victim-%d", time.Now().UnixNano()))
	if err := os.WriteFile(p, []byte("#!/bin/sh\necho I run as root\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(p, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(p) })
	return p
}

func modeAndOwner(t *testing.T, p string) (uint32, uint32) {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		t.Fatal(err)
	}
	return st.Mode, st.Uid
}

// memberProject makes a project owned by the member (so that a project's
// owner may use it, whatever the per-project access says), with files.
func memberProject(t *testing.T, name string, uid, gid uint32, files map[string]string) string {
	t.Helper()
	path := addProject(t, name, files)
	testbed.MustRun(t, "chown", "-R", fmt.Sprintf("%d:%d", uid, gid), path)
	return path
}

// TestHostilePromoteChmodDoesNotFollowASymlink is issue 15's finding 1,
// as a member of group sandboxd would do it: a change of f's mode alone
// in one sandbox; f replaced by a symlink to a root-owned file outside
// the project in another, promoted; then the first promoted with --force.
// The root-owned file keeps its mode and owner, whatever the mode asked
// (4755, or 0777: world-writable), also when an admin allows set-id files.
func TestHostilePromoteChmodDoesNotFollowASymlink(t *testing.T) {
	const member = "hostile-a"
	uid, gid := groupMember(t, member)
	reconfigure(t, "")
	victim := rootVictim(t)
	path := memberProject(t, "hostile-chmod", uid, gid, map[string]string{"f": "#!/bin/sh\n", "g": "g\n"})

	setuid := strings.TrimSpace(okAs(t, member, "create", "--quiet", "hostile-chmod"))
	world := strings.TrimSpace(okAs(t, member, "create", "--quiet", "hostile-chmod"))
	link := strings.TrimSpace(okAs(t, member, "create", "--quiet", "hostile-chmod"))
	okAs(t, member, "exec", setuid, "--", "chmod", "4755", "f")
	okAs(t, member, "exec", world, "--", "chmod", "0777", "f")
	okAs(t, member, "exec", link, "--", "sh", "-c", "rm f && ln -s "+victim+" f")
	okAs(t, member, "promote", link)
	if target, err := os.Readlink(filepath.Join(path, "f")); err != nil || target != victim {
		t.Fatalf("f in the project after the symlink's promotion: %q, %v", target, err)
	}

	// The control: a change of mode alone is promoted onto a plain file.
	ctrl := strings.TrimSpace(okAs(t, member, "create", "--quiet", "hostile-chmod"))
	okAs(t, member, "exec", ctrl, "--", "chmod", "0700", "g")
	okAs(t, member, "promote", ctrl)
	if m, _ := modeAndOwner(t, filepath.Join(path, "g")); m&0o7777 != 0o700 {
		t.Fatalf("the control: g in the project is %o after promoting chmod 0700; want 700", m&0o7777)
	}

	// chmod 4755, forced: refused (a setuid file), the victim untouched.
	out, errOut, code := ctlAs(t, member, "promote", "--force", setuid)
	if m, owner := modeAndOwner(t, victim); m&0o7777 != 0o755 || owner != 0 {
		t.Fatalf("the root-owned file behind f is mode %o, uid %d after a forced promotion of chmod 4755 f; want 755, root's (exit %d: %s%s)",
			m&0o7777, owner, code, out, errOut)
	}
	if code != 4 || !strings.Contains(errOut, "f (setuid)") {
		t.Errorf("promote --force of chmod 4755 f: exit %d: %s%s; want exit 4 naming f (setuid)", code, out, errOut)
	}
	// chmod 0777, forced: the stage fails (f is a symlink in the project,
	// a file in the sandbox), the victim untouched, f still the link.
	out, errOut, code = ctlAs(t, member, "promote", "--force", world)
	if m, owner := modeAndOwner(t, victim); m&0o7777 != 0o755 || owner != 0 {
		t.Fatalf("the root-owned file behind f is mode %o, uid %d after a forced promotion of chmod 0777 f; want 755, root's (exit %d: %s%s)",
			m&0o7777, owner, code, out, errOut)
	}
	if code != 1 || !strings.Contains(out+errOut, "setting the metadata of f: it is a symlink in the target and a file in the source") {
		t.Errorf("promote --force of chmod 0777 f: exit %d: %s%s; want exit 1 naming f", code, out, errOut)
	}
	// An admin (root) allowing set-id files: the same refusal by kind.
	out, errOut, code = ctl(t, "", "promote", "--force", "--allow-privileged", setuid)
	if m, owner := modeAndOwner(t, victim); m&0o7777 != 0o755 || owner != 0 {
		t.Fatalf("the root-owned file behind f is mode %o, uid %d after an admin's forced promotion of chmod 4755 f; want 755 (exit %d: %s%s)",
			m&0o7777, owner, code, out, errOut)
	}
	if code != 1 || !strings.Contains(out+errOut, "setting the metadata of f: it is a symlink") {
		t.Errorf("an admin's promote --force --allow-privileged of chmod 4755 f: exit %d: %s%s; want exit 1 naming f", code, out, errOut)
	}
	if target, err := os.Readlink(filepath.Join(path, "f")); err != nil || target != victim {
		t.Fatalf("f in the project after the refused promotions: %q, %v; want the symlink as it was", target, err)
	}
}

// TestHostilePromoteRefusesPrivilegedFiles is the promotion part of issue
// 15's finding 10: a sandbox run as root plants a setuid-root file, a
// device node and a file with capabilities; promoting them is refused by
// default, naming each; a group member cannot allow them; an admin can,
// and then the set-id file and the device arrive (capabilities never do:
// a promotion copies no xattrs).
func TestHostilePromoteRefusesPrivilegedFiles(t *testing.T) {
	const member = "hostile-a"
	uid, gid := groupMember(t, member)
	reconfigure(t, "")
	path := addProject(t, "hostile-priv", map[string]string{"tool": "#!/bin/sh\n", "capped": "x\n", "plain": "p\n"})
	id := strings.TrimSpace(ok(t, "create", "--quiet", "hostile-priv"))
	ok(t, "exec", "--root", id, "--", "sh", "-c", "chown 0:0 tool && chmod 4755 tool && echo changed > plain")
	// Inside, root has neither CAP_MKNOD nor (maybe) CAP_SETFCAP: what it
	// cannot make there is put into the sandbox's volume from the host,
	// as a sandbox that could would have left it.
	sbPath := property(t, "/org/sandboxd1/sandbox/"+id, "Path")
	if _, _, code := ctl(t, "", "exec", "--root", id, "--", "mknod", "null2", "c", "1", "3"); code != 0 {
		t.Logf("mknod inside the sandbox is refused (no CAP_MKNOD); made from the host in its volume")
		if err := unix.Mknod(filepath.Join(sbPath, "null2"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, code := ctl(t, "", "exec", "--root", id, "--", "setcap", "cap_net_bind_service+ep", "capped"); code != 0 {
		t.Logf("setcap inside the sandbox is refused; done from the host in its volume")
		testbed.MustRun(t, "setcap", "cap_net_bind_service+ep", filepath.Join(sbPath, "capped"))
	}

	out, errOut, code := ctl(t, "", "promote", id)
	for _, want := range []string{"tool (setuid)", "null2 (character device)", "capped (file capabilities)", "--allow-privileged"} {
		if code != 4 || !strings.Contains(errOut, want) {
			t.Errorf("promoting privileged files: exit %d: %s%s; want exit 4 saying %q", code, out, errOut, want)
		}
	}
	if m, _ := modeAndOwner(t, filepath.Join(path, "tool")); m&0o7777 != 0o644 {
		t.Fatalf("tool in the project after the refusal is mode %o; want 644", m&0o7777)
	}
	if _, err := os.Lstat(filepath.Join(path, "null2")); !os.IsNotExist(err) {
		t.Fatalf("null2 is in the project after the refusal (%v)", err)
	}
	if data, _ := os.ReadFile(filepath.Join(path, "plain")); string(data) != "p\n" {
		t.Fatalf("plain after the refusal: %q; want nothing of the promotion applied", data)
	}

	// A group member's own setuid file: refused, and it may not allow it.
	mpath := memberProject(t, "hostile-priv2", uid, gid, map[string]string{"mine": "#!/bin/sh\n"})
	mid := strings.TrimSpace(okAs(t, member, "create", "--quiet", "hostile-priv2"))
	okAs(t, member, "exec", mid, "--", "chmod", "4755", "mine")
	if out, errOut, code := ctlAs(t, member, "promote", mid); code != 4 || !strings.Contains(errOut, "mine (setuid)") {
		t.Errorf("a member promoting a setuid file: exit %d: %s%s; want exit 4 naming mine (setuid)", code, out, errOut)
	}
	if out, errOut, code := ctlAs(t, member, "promote", "--allow-privileged", mid); code != 4 || !strings.Contains(errOut, "only an admin may allow") {
		t.Errorf("a member passing --allow-privileged: exit %d: %s%s; want exit 4, only an admin", code, out, errOut)
	}
	if m, _ := modeAndOwner(t, filepath.Join(mpath, "mine")); m&0o7000 != 0 {
		t.Fatalf("mine in the member's project is mode %o after the refusals; want no set-id bit", m&0o7777)
	}

	// An admin allows them: they arrive, the capability does not, and the
	// audit log says who allowed which.
	out = ok(t, "promote", "--allow-privileged", id)
	if !strings.Contains(out, "passed") {
		t.Fatalf("an admin's promote --allow-privileged:\n%s", out)
	}
	// The allowance is in the promotion's record, which outlives a restart.
	if f := strings.Fields(out); len(f) < 2 || f[0] != "promotion" {
		t.Errorf("promote printed %q first; want the promotion's id", out)
	} else {
		rec := testbed.MustRun(t, "busctl", "call", "org.sandboxd1", "/org/sandboxd1", "org.sandboxd1.Manager", "GetPromotion", "s", strings.TrimSuffix(f[1], ":"))
		if !strings.Contains(rec, `allow_privileged\":true`) {
			t.Errorf("the promotion's record does not say an admin allowed privileged files: %s", rec)
		}
	}
	if m, owner := modeAndOwner(t, filepath.Join(path, "tool")); m&0o7777 != 0o4755 || owner != 0 {
		t.Fatalf("tool after an admin allowed it: mode %o uid %d; want 4755, root's", m&0o7777, owner)
	}
	if m, _ := modeAndOwner(t, filepath.Join(path, "null2")); m&unix.S_IFMT != unix.S_IFCHR {
		t.Fatalf("null2 after an admin allowed it: mode %o; want a character device", m)
	}
	if _, err := unix.Lgetxattr(filepath.Join(path, "capped"), "security.capability", nil); !errors.Is(err, unix.ENODATA) {
		t.Fatalf("capped in the project has capabilities (%v); a promotion carries none", err)
	}
	audit, err := os.ReadFile("/var/log/sandboxd/audit.log")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(audit), `"action":"promote-privileged"`) || !strings.Contains(string(audit), "tool (setuid)") {
		t.Errorf("the audit log does not say an admin let tool (setuid) through")
	}
}

// TestHostilePromoteChecksOnAReplicaStageAreRefused is issue 15's finding
// 2 against the real daemon: a configuration with checks on a path stage
// is refused at load (the daemon does not start, and says why); the same
// check on the project stage runs (in a sandbox).
func TestHostilePromoteChecksOnAReplicaStageAreRefused(t *testing.T) {
	tb := install(t)
	addProject(t, "hostile-stage", map[string]string{"check.sh": "echo the check ran as $(id -u)\n"})
	reconfigure(t, promoteStages)
	id := strings.TrimSpace(ok(t, "create", "--quiet", "hostile-stage"))
	ok(t, "exec", id, "--", "sh", "-c", "echo x > x")
	if out := ok(t, "promote", id); !strings.Contains(out, `check "sh check.sh": passed`) {
		t.Fatalf("the control, a check on the project stage:\n%s", out)
	}

	bad := baseConfig(tb) + promoteStages + fmt.Sprintf(`
[[stage]]
name = "staging"
target = %q
checks = ["sh check.sh"]
`, filepath.Join(tb.Btrfs.Mount, "staging-{project}"))
	if err := os.WriteFile("/etc/sandboxd/sandboxd.toml", []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	testbed.MustRun(t, "systemctl", "reset-failed", "sandboxd.service")
	if err := exec.Command("systemctl", "restart", "sandboxd.service").Run(); err == nil {
		t.Fatalf("sandboxd started with checks on a path stage")
	}
	journal := testbed.MustRun(t, "journalctl", "-u", "sandboxd.service", "-n", "50", "--no-pager")
	if !strings.Contains(journal, "the checks of stage staging") || !strings.Contains(journal, "would run outside a sandbox: not supported; put checks on the project stage") {
		t.Fatalf("the journal does not say why sandboxd refused the configuration:\n%s", journal)
	}
	// reconfigure's cleanup puts the usual configuration back and restarts.
}

// TestHostilePromoteFailedCheckKeepsOthersEdits is the second half of
// issue 15's finding 4: while a promotion's check runs, someone writes a
// new file into the project on the host and edits another; the check
// fails. The promotion's own change is gone, and the host's writes stay,
// also one inside a directory the promotion added (that directory stays,
// holding only the host's file, and the promotion's error names it).
func TestHostilePromoteFailedCheckKeepsOthersEdits(t *testing.T) {
	path := addProject(t, "hostile-rollback", map[string]string{
		"check.sh": "sleep 3; echo failing on purpose; exit 1\n", "app.txt": "v1\n", "notes.txt": "n1\n",
	})
	reconfigure(t, promoteStages)
	id := strings.TrimSpace(ok(t, "create", "--quiet", "hostile-rollback"))
	ok(t, "exec", id, "--", "sh", "-c", "echo v2 > app.txt && echo promoted > new.txt && mkdir gen && echo g > gen/out.txt")
	pid := strings.TrimSpace(ok(t, "promote", "--no-wait", id))
	deadline := time.Now().Add(time.Minute)
	for {
		p := promotionRecord(t, pid)
		if p.Stages[0].State == "checking" {
			break
		}
		if p.State != "running" || time.Now().After(deadline) {
			t.Fatalf("the promotion never reached its check: %+v", p)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The control: the change is in the project while the check runs.
	if data, _ := os.ReadFile(filepath.Join(path, "app.txt")); string(data) != "v2\n" {
		t.Fatalf("app.txt while the check runs: %q; want the promoted v2", data)
	}
	if err := os.WriteFile(filepath.Join(path, "host.txt"), []byte("written on the host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(path, "notes.txt"), []byte("n2 from the host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(path, "gen", "host.txt"), []byte("host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var p struct{ State, Error string }
	for {
		if err := json.Unmarshal([]byte(ok(t, "--json", "promotions", pid)), &p); err != nil {
			t.Fatal(err)
		}
		if p.State != "running" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the promotion did not end")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if p.State != "failed" {
		t.Fatalf("the promotion whose check fails: %s", p.State)
	}
	want := map[string]string{"app.txt": "v1\n", "host.txt": "written on the host\n", "notes.txt": "n2 from the host\n", "gen/host.txt": "host\n"}
	for name, text := range want {
		if data, err := os.ReadFile(filepath.Join(path, name)); err != nil || string(data) != text {
			t.Errorf("%s after the failed check: %q, %v; want %q", name, data, err, text)
		}
	}
	for _, gone := range []string{"new.txt", "gen/out.txt"} {
		if _, err := os.Stat(filepath.Join(path, gone)); !os.IsNotExist(err) {
			t.Errorf("%s, the promotion's, is still in the project after its check failed (%v)", gone, err)
		}
	}
	if !strings.Contains(p.Error, "except these, left because others made entries in them since: gen") {
		t.Errorf("the failed promotion's error does not name gen, left for the host's file in it: %q", p.Error)
	}
}
