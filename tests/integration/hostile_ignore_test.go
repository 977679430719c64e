package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestHostileSandboxIgnoreHidesNothingFromTheApprover: a member of group
// sandboxd, owner of its project, has a sandbox write a .sandboxignore
// that says "*" (and "!*.log"), plants secret.txt, changes app.txt, and
// asks for a promotion that an admin must approve. The rules are the
// project's as the host has it (the sandbox's base): the admin's diff
// lists secret.txt, app.txt and the new .sandboxignore, and leaves out
// only run.log, as the project's own "*.log" says (the control: rules
// in the project do hide what they name, so the sandbox's would have
// hidden everything had they counted; checked against a daemon reading
// the sandbox's copy, which lists none of the three). Approved, all
// three reach the host, run.log does not.
func TestHostileSandboxIgnoreHidesNothingFromTheApprover(t *testing.T) {
	const member = "hostile-ign"
	uid, gid := groupMember(t, member)
	reconfigure(t, "\n[[stage]]\nname = \"project\"\ntarget = \"project\"\napproval = \"admin\"\n")
	path := memberProject(t, "hostile-ign", uid, gid, map[string]string{
		".sandboxignore": "# the project's own\n*.log\n",
		"app.txt":        "v1\n",
	})
	id := strings.TrimSpace(okAs(t, member, "create", "--quiet", "hostile-ign"))
	okAs(t, member, "exec", id, "--", "sh", "-c", "printf '*\\n!*.log\\n' > .sandboxignore && echo planted > secret.txt && echo v2 > app.txt && echo noise > run.log")
	out := okAs(t, member, "promote", id)
	if !strings.Contains(out, "waiting") || leftOut(out) != 1 {
		t.Fatalf("the member's promotion: want it waiting for an admin, 1 path left out:\n%s", out)
	}
	pid := promotionIDRe.FindStringSubmatch(out)[1]

	// What the admin reviews.
	out = ok(t, "diff", id)
	for _, want := range []string{"A secret.txt", "M .sandboxignore", "M app.txt"} {
		if !strings.Contains(out, want) {
			t.Errorf("the admin's diff does not list %q: the sandbox's .sandboxignore hid it:\n%s", want, out)
		}
	}
	if strings.Contains(out, "run.log") || leftOut(out) != 1 {
		t.Errorf("the admin's diff: the project's *.log does not leave run.log out (1 path):\n%s", out)
	}
	ok(t, "approve", "--yes", pid)
	for file, want := range map[string]string{"secret.txt": "planted\n", "app.txt": "v2\n", ".sandboxignore": "*\n!*.log\n"} {
		if data, err := os.ReadFile(filepath.Join(path, file)); err != nil || string(data) != want {
			t.Errorf("the host's %s after the approval: %q, %v; want %q", file, data, err, want)
		}
	}
	if _, err := os.Lstat(filepath.Join(path, "run.log")); !os.IsNotExist(err) {
		t.Errorf("run.log, which the project's rules leave out, reached the host: %v", err)
	}
}

// TestHostileSandboxIgnoreSymlinkReadsNoRootFile: a member whose project's
// .sandboxignore is a symlink to a root-only file, hoping the root daemon
// reads it as rules and names its "bad pattern" in an error. The member
// cannot read the file (the control); the daemon reads the rules beneath
// the snapshot through no symlink: diff and promote fail saying the
// .sandboxignore is a symlink, and nothing of the file is in any answer.
func TestHostileSandboxIgnoreSymlinkReadsNoRootFile(t *testing.T) {
	const member = "hostile-ign"
	uid, gid := groupMember(t, member)
	reconfigure(t, "")
	secret := filepath.Join("/var/tmp", "ign-secret-"+suffix())
	if err := os.WriteFile(secret, []byte("TOPSECRET-[\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(secret) })
	path := memberProject(t, "hostile-ignlink", uid, gid, map[string]string{"app.txt": "v1\n"})
	if err := os.Symlink(secret, filepath.Join(path, ".sandboxignore")); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(filepath.Join(path, ".sandboxignore"), int(uid), int(gid)); err != nil {
		t.Fatal(err)
	}
	// The control: the member cannot read the file; root following the
	// link would read the secret.
	if out, err := catAs(member, filepath.Join(path, ".sandboxignore")); err == nil || strings.Contains(out, "TOPSECRET") {
		t.Fatalf("the member reads the root-only file: %q, %v", out, err)
	}
	if data, err := os.ReadFile(filepath.Join(path, ".sandboxignore")); err != nil || !strings.Contains(string(data), "TOPSECRET") {
		t.Fatalf("the link does not lead to the secret: %q, %v", data, err)
	}
	id := strings.TrimSpace(okAs(t, member, "create", "--quiet", "hostile-ignlink"))
	okAs(t, member, "exec", id, "--", "sh", "-c", "echo v2 > app.txt")
	for _, args := range [][]string{{"diff", id}, {"diff", "-u", id}, {"promote", id}} {
		out, errOut, code := ctlAs(t, member, args...)
		if code == 0 || !strings.Contains(errOut, ".sandboxignore is a symlink") || strings.Contains(out+errOut, "TOPSECRET") {
			t.Errorf("sandboxctl %s as the member: exit %d\n%s%s\nwant a refusal naming the symlink, nothing of the file", strings.Join(args, " "), code, out, errOut)
		}
	}
	if data, _ := os.ReadFile(filepath.Join(path, "app.txt")); string(data) != "v1\n" {
		t.Errorf("the project's app.txt changed: %q", data)
	}
}

// catAs reads file as user name.
func catAs(name, file string) (string, error) {
	out, err := exec.Command("setpriv", "--reuid="+name, "--regid="+name, "--init-groups", "cat", file).CombinedOutput()
	return string(out), err
}
