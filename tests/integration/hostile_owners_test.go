package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Issue 29's owners, attacked: what root inside a member's sandbox does
// to owners, and what its promotion carries to the host or shows to an
// admin who approves it.

// A set-gid directory passes on only the group the host's would. Root
// inside the agent's sandbox of web makes the project's top directory
// (the host's is root's, group root) and a directory of the agent's, of
// group www-data, set-gid; the agent's new files in them take those
// groups. On the host the agent could do neither (the control: its chmod
// g+s of its own www-data directory leaves no set-gid bit, the kernel
// clears it; and the top directory is not its own): its promotion is
// refused, naming the files and the directory, and the host has none of
// it. Before, the set-gid rule read the parent in the sandbox's copy,
// and the top directory's own metadata is never listed at all: both
// passed, the host got files of group root and of group www-data, and a
// set-gid www-data directory.
func TestHostileOwnersASetGidDirectoryPassesOnNoGroupTheHostWouldNot(t *testing.T) {
	tb, uid, gid := rootInsideSetup(t)
	top := tb.Btrfs.Project
	_, tg, _ := ownerOf(t, top)
	if tg == gid {
		t.Fatalf("the control: web's top directory is of the agent's group (%d); want another", tg)
	}
	shared, topNew := "owners-sgid-"+suffix(), "owners-sgid-top-"+suffix()
	hostShared := filepath.Join(top, shared)
	if err := os.Mkdir(hostShared, 0o775); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(hostShared); os.Remove(filepath.Join(top, topNew)) })
	if err := os.Chown(hostShared, int(uid), wwwData); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(hostShared, 0o775); err != nil {
		t.Fatal(err)
	}
	// On the host, the agent's own chmod g+s of its www-data directory
	// sets no set-gid bit.
	if out, err := exec.Command("setpriv", fmt.Sprintf("--reuid=%d", uid), fmt.Sprintf("--regid=%d", gid), "--init-groups",
		"chmod", "g+s", hostShared).CombinedOutput(); err != nil {
		t.Fatalf("the control: the agent's chmod g+s on the host: %v: %s", err, out)
	}
	if _, _, m := ownerOf(t, hostShared); m&0o2000 != 0 {
		t.Fatalf("the control: the agent made its www-data directory set-gid on the host (mode %o): it is in www-data", m)
	}
	id := agentSandbox(t)

	agentShOK(t, id, true, "chmod g+s . "+shared)
	got := agentShOK(t, id, false, fmt.Sprintf("touch %s %s/new && stat -c %%g %s %s/new", topNew, shared, topNew, shared))
	if want := fmt.Sprintf("%d\n%d\n", tg, wwwData); got != want {
		t.Fatalf("the control: the agent's new files inside are of groups %q; want %q", got, want)
	}
	out, errOut, code := ctlAs(t, rootAgent, "promote", id)
	if code != 4 {
		t.Errorf("the agent's promotion of files of groups a set-gid directory passed on inside: exit %d: %s%s; want 4", code, out, errOut)
	}
	for _, want := range []string{
		topNew + " (new, of group",
		shared + "/new (new, of group gid 33",
		shared + " (made set-gid, of group gid 33",
		"not the promoter's",
	} {
		if !strings.Contains(errOut, want) {
			t.Errorf("the refusal does not say %q:\n%s", want, errOut)
		}
	}
	if _, err := os.Lstat(filepath.Join(top, topNew)); !os.IsNotExist(err) {
		t.Errorf("the host has %s after the refused promotion (%v)", topNew, err)
	}
	if _, err := os.Lstat(filepath.Join(hostShared, "new")); !os.IsNotExist(err) {
		t.Errorf("the host has %s/new after the refused promotion (%v)", shared, err)
	}
	if _, _, m := ownerOf(t, hostShared); m != 0o775 {
		t.Errorf("the host's %s after the refused promotion: mode %o; want 775", shared, m)
	}
}

// An admin who approves a promotion sees every owner it changes: root
// inside the agent's sandbox gives the agent's file and directory to
// root and makes a new file of root's. The change list names them only
// as "metadata" and "added"; the text diff the admin reads says who owned
// each and who will (before, a chown-only change showed nothing at all,
// and a new file nothing of its owner).
func TestHostileOwnersAnApproverSeesEveryOwnerChange(t *testing.T) {
	tb, uid, gid := rootInsideSetup(t)
	file, dir, made := "owners-chown-"+suffix(), "owners-chdir-"+suffix(), "owners-made-"+suffix()
	webFile(t, tb, file, []byte("the agent's\n"), uid, gid, 0o644)
	hostDir := filepath.Join(tb.Btrfs.Project, dir)
	if err := os.Mkdir(hostDir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(hostDir) })
	if err := os.Chown(hostDir, int(uid), int(gid)); err != nil {
		t.Fatal(err)
	}
	id := agentSandbox(t)

	agentShOK(t, id, true, fmt.Sprintf("chown 0:0 %s %s && echo root > %s", file, dir, made))
	list := ok(t, "diff", id)
	for _, want := range []string{"m " + file, "m " + dir + "/", "A " + made} {
		if !strings.Contains(list, want+"\n") {
			t.Fatalf("the control: the change list lacks %q:\n%s", want, list)
		}
	}
	text := ok(t, "diff", "--text", id)
	for _, want := range []string{
		fmt.Sprintf("diff --git a/%s b/%s\nold owner %d:%d\nnew owner 0:0\n", file, file, uid, gid),
		fmt.Sprintf("owner of directory %s/ changed from %d:%d to 0:0\n", dir, uid, gid),
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the admin's text diff does not say %q:\n%s", want, text)
		}
	}
	header, _, _ := strings.Cut(text[strings.Index(text, "diff --git a/"+made)+1:], "\n--- ")
	if !strings.Contains(header+"\n", "\nnew file owner 0:0\n") {
		t.Errorf("the admin's text diff does not name the owner of the new %s:\n%s", made, text)
	}
}
