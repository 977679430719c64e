package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// accBus calls method of interface org.sandboxd1.Sandbox on sandbox id as
// user who (busctl, so that nothing of sandboxctl stands between) and
// returns its output and whether it succeeded.
func accBus(t *testing.T, who, id, method string) (string, bool) {
	t.Helper()
	out, err := exec.Command("setpriv", "--reuid="+who, "--regid="+who, "--init-groups",
		"busctl", "call", "org.sandboxd1", "/org/sandboxd1/sandbox/"+id, "org.sandboxd1.Sandbox", method).CombinedOutput()
	return string(out), err == nil
}

// A user taken off a project's users keeps its old sandbox of the project
// (its own copy), but may no longer read the project through it: neither
// Rebase (which pulls the project's content as it is now) nor
// ProjectChanges (which lists the paths it changed) is served, refused
// with "access denied", naming the project and the caller. The controls: the
// same calls were served while it was listed, and root's still are.
func TestHostileRevokedUserMayNotRebaseOrReadProjectChanges(t *testing.T) {
	accessUsers(t)
	proj := accessProject(t, "acc-rebase", "root:root", 0o755, map[string]os.FileMode{"readme": 0o644})
	projects := fmt.Sprintf("[[project]]\nname = \"rebasing\"\npath = %q\n", proj)
	reconfigure(t, projects+fmt.Sprintf("users = [%q]\n", accAlice))
	accDestroyAtEnd(t, "rebasing")
	id := strings.TrimSpace(accOK(t, accAlice, "create", "--quiet", "rebasing"))

	// While listed: both work, and the rebase brings the project's new file.
	if err := os.WriteFile(filepath.Join(proj, "before.txt"), []byte("written while listed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, ok := accBus(t, accAlice, id, "ProjectChanges"); !ok || !strings.Contains(out, "before.txt") {
		t.Fatalf("ProjectChanges as %s while listed (the control): %s", accAlice, out)
	}
	if out, ok := accBus(t, accAlice, id, "Rebase"); !ok {
		t.Fatalf("Rebase as %s while listed (the control): %s", accAlice, out)
	}
	if out := accOK(t, accAlice, "exec", id, "--", "cat", "before.txt"); out != "written while listed\n" {
		t.Fatalf("after the control's rebase, before.txt in the sandbox reads %q", out)
	}

	// Taken off the project's users; the project moves on.
	reconfigure(t, projects)
	if err := os.WriteFile(filepath.Join(proj, "after.txt"), []byte("written once revoked\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf(`uid %s may not use project "rebasing"`, accUID(t, accAlice))
	for _, method := range []string{"ProjectChanges", "Rebase"} {
		out, ok := accBus(t, accAlice, id, method)
		if ok || !strings.Contains(out, want) || !strings.HasSuffix(strings.TrimSpace(out), "access denied") {
			t.Errorf("%s as %s once revoked: succeeded=%v, %q; want a refusal saying %q", method, accAlice, ok, out, want)
		}
		if strings.Contains(out, "after.txt") {
			t.Errorf("%s as %s once revoked names the project's new file: %s", method, accAlice, out)
		}
	}
	if out, errOut, code := accCtl(t, accAlice, "rebase", id); code == 0 || !strings.Contains(errOut, want) {
		t.Errorf("sandboxctl rebase as %s once revoked: exit %d, %q%q; want a refusal saying %q", accAlice, code, out, errOut, want)
	}
	if out := accOK(t, accAlice, "exec", id, "--", "sh", "-c", "ls; cat after.txt 2>/dev/null || true"); strings.Contains(out, "written once revoked") {
		t.Errorf("the project's new file reached the revoked user's sandbox:\n%s", out)
	}
	// Root (an admin) still reads the same sandbox's project changes: the
	// refusal is the caller's, not a broken sandbox.
	if out, ok := busctl("/org/sandboxd1/sandbox/"+id, "org.sandboxd1.Sandbox", "ProjectChanges"); !ok || !strings.Contains(out, "after.txt") {
		t.Errorf("ProjectChanges as root of the same sandbox: %s", out)
	}
}

// A project whose name now stands for another volume (moved in
// sandboxd.toml, or removed and added again elsewhere) is not the project
// an old sandbox of that name was made of: Rebase, ProjectChanges and
// Promote refuse, saying where it was and where it is, and nothing of the
// sandbox reaches the new location. The control: a rebase while it was
// in place worked.
func TestHostileRebaseAndPromoteRefuseAProjectThatMoved(t *testing.T) {
	install(t)
	oldPath := accessProject(t, "acc-moved-old", "root:root", 0o755, map[string]os.FileMode{"readme": 0o644})
	newPath := accessProject(t, "acc-moved-new", "root:root", 0o755, map[string]os.FileMode{"other": 0o644})
	project := func(path string) string { return fmt.Sprintf("[[project]]\nname = \"moving\"\npath = %q\n", path) }
	reconfigure(t, project(oldPath))
	accDestroyAtEnd(t, "moving")
	id := strings.TrimSpace(ok(t, "create", "--quiet", "moving"))
	ok(t, "exec", id, "--", "sh", "-c", "echo from the sandbox > sandboxed.txt")
	if err := os.WriteFile(filepath.Join(oldPath, "moved-on.txt"), []byte("new\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ok(t, "rebase", id) // the control

	reconfigure(t, project(newPath))
	want := fmt.Sprintf("is now at %s, not at %s", newPath, oldPath)
	for _, method := range []string{"ProjectChanges", "Rebase"} {
		if out, ok := busctl("/org/sandboxd1/sandbox/"+id, "org.sandboxd1.Sandbox", method); ok || !strings.Contains(out, want) {
			t.Errorf("%s of a sandbox whose project moved: succeeded=%v, %q; want a refusal saying %q", method, ok, out, want)
		}
	}
	if out, errOut, code := ctl(t, "", "promote", id); code == 0 || !strings.Contains(errOut, want) {
		t.Errorf("promote of a sandbox whose project moved: exit %d, %q%q; want a refusal saying %q", code, out, errOut, want)
	}
	if _, err := os.Stat(filepath.Join(newPath, "sandboxed.txt")); err == nil {
		t.Errorf("the sandbox's change reached the project's new location")
	}
	// A new sandbox of the project's new location is served.
	fresh := strings.TrimSpace(ok(t, "create", "--quiet", "moving"))
	if out, ok := busctl("/org/sandboxd1/sandbox/"+fresh, "org.sandboxd1.Sandbox", "ProjectChanges"); !ok {
		t.Errorf("ProjectChanges of a new sandbox of the moved project: %s", out)
	}
}

// While one user's promotion of a project runs, another user's promotion
// of it is refused as busy without the first one's id (an id of another
// user's is theirs); its owner and root are told the id (the controls).
func TestHostileBusyPromotionIsNamedOnlyToItsOwner(t *testing.T) {
	accessUsers(t)
	proj := accessProject(t, "acc-busy", "root:root", 0o777, map[string]os.FileMode{"readme": 0o644})
	reconfigure(t, fmt.Sprintf("[[project]]\nname = \"busy\"\npath = %q\nusers = [%q, %q]\n", proj, accAlice, accBob)+promoteStages)
	accDestroyAtEnd(t, "busy")
	slow := strings.TrimSpace(accOK(t, accAlice, "create", "--quiet", "busy"))
	accOK(t, accAlice, "exec", slow, "--", "sh", "-c", "echo 'sleep 5' > check.sh")
	second := strings.TrimSpace(accOK(t, accAlice, "create", "--quiet", "busy"))
	others := strings.TrimSpace(accOK(t, accBob, "create", "--quiet", "busy"))
	roots := strings.TrimSpace(ok(t, "create", "--quiet", "busy"))
	for who, id := range map[string]string{accAlice: second, accBob: others, "root": roots} {
		script := "echo " + who + " > " + who + ".txt"
		if who == "root" {
			ok(t, "exec", id, "--", "sh", "-c", script)
		} else {
			accOK(t, who, "exec", id, "--", "sh", "-c", script)
		}
	}
	pid := strings.TrimSpace(accOK(t, accAlice, "promote", "--no-wait", slow))
	if !regexp.MustCompile(`^[0-9a-f]{12}$`).MatchString(pid) {
		t.Fatalf("promote --no-wait printed %q; want a promotion id", pid)
	}
	busy := "promotion " + pid + " of project busy is under way"
	if _, errOut, code := accCtl(t, accBob, "promote", others); code == 0 ||
		!strings.Contains(errOut, "another promotion of project busy is under way") || strings.Contains(errOut, pid) {
		t.Errorf("%s's promote while %s's runs: exit %d, %q; want busy, without the other's id %s", accBob, accAlice, code, errOut, pid)
	}
	if _, errOut, code := accCtl(t, accAlice, "promote", second); code == 0 || !strings.Contains(errOut, busy) {
		t.Errorf("%s's second promote while her first runs: exit %d, %q; want %q", accAlice, code, errOut, busy)
	}
	if _, errOut, code := ctl(t, "", "promote", roots); code == 0 || !strings.Contains(errOut, busy) {
		t.Errorf("root's promote while %s's runs: exit %d, %q; want %q", accAlice, code, errOut, busy)
	}
}
