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

// A renamed directory carries nothing the ignore rules leave out.
// Project web leaves out __pycache__/ and *.env. Root inside the agent's
// sandbox writes a bytecode file (code Python runs in place of the
// source it was compiled from) and a .env into root's pkg: the control,
// the diff lists neither and counts them left out. Then the agent renames
// pkg to lib, and an admin reviews the diff and promotes it. A promotion
// copied a renamed directory's whole tree: the bytecode and the .env
// reached the host with it, while the diff, its text too, left them out
// (the admin was shown "renamed directory pkg/ to lib/" and nothing of
// them). Now the rename of a tree that holds what the rules leave out is
// carried as the removal of the old directory and the new one's kept
// paths: the host has lib/mod.py and neither lib/__pycache__ nor
// lib/local.env.
func TestHostileIgnoreARenamedDirectoryCarriesNothingTheRulesLeaveOut(t *testing.T) {
	tb := install(t)
	regularMember(t, rootAgent)
	reconfigure(t, fmt.Sprintf("users = [%q]\nignore = [\"__pycache__/\", \"*.env\"]\n", rootAgent))
	pkg, lib := "ign-pkg-"+suffix(), "ign-lib-"+suffix()
	hostPkg := filepath.Join(tb.Btrfs.Project, pkg)
	if err := os.Mkdir(hostPkg, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(hostPkg); os.RemoveAll(filepath.Join(tb.Btrfs.Project, lib)) })
	if err := os.WriteFile(filepath.Join(hostPkg, "mod.py"), []byte("X = 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	id := agentSandbox(t)
	agentShOK(t, id, true, fmt.Sprintf("mkdir %s/__pycache__ && echo 'evil bytecode' > %s/__pycache__/mod.cpython-311.pyc && echo TOKEN=s3cret > %s/local.env", pkg, pkg, pkg))
	out := ok(t, "diff", id)
	if strings.Contains(out, "__pycache__") || strings.Contains(out, "local.env") || leftOut(out) != 3 {
		t.Fatalf("the control: the diff lists what the rules leave out, or does not count it (3 paths):\n%s", out)
	}

	agentShOK(t, id, false, "mv "+pkg+" "+lib)
	for _, args := range [][]string{{"diff", id}, {"diff", "--text", id}} {
		out := ok(t, args...)
		if strings.Contains(out, "__pycache__") || strings.Contains(out, "local.env") || !strings.Contains(out, lib) {
			t.Errorf("sandboxctl %s after the rename: it lists what the rules leave out, or not %s:\n%s", strings.Join(args, " "), lib, out)
		}
	}
	ok(t, "promote", id)
	if data, err := os.ReadFile(filepath.Join(tb.Btrfs.Project, lib, "mod.py")); err != nil || string(data) != "X = 1\n" {
		t.Errorf("the host's %s/mod.py after the promotion: %q, %v", lib, data, err)
	}
	for _, p := range []string{lib + "/__pycache__", lib + "/local.env", pkg} {
		if _, err := os.Lstat(filepath.Join(tb.Btrfs.Project, p)); !os.IsNotExist(err) {
			t.Errorf("the host has %s after the promotion (%v): the rules leave it out, or it was renamed", p, err)
		}
	}
}

// A promoter other than root takes no file of another's on the host.
// Root inside the agent's sandbox gives root's deploy script, at the top
// of web (root's directory on the host), to the agent, its uid alone
// (the group stays root's). On the host the agent can neither write the
// script nor chown it (the control); its promotion of that is refused,
// naming the script, and the script stays root's. Before, a change that
// gave a file to the promoter was no giving away: the promotion passed
// and the agent owned root's script on the host, to change at will with
// no sandbox and no approval. A root file in a directory of the agent's
// is another matter: the agent could replace it with its own copy on the
// host, so giving it to the agent and its group promotes.
func TestHostileOwnersAPromoterTakesNoFileOfAnothers(t *testing.T) {
	tb, uid, gid := rootInsideSetup(t)
	script, own := "owners-deploy-"+suffix()+".sh", "owners-own-"+suffix()
	hostScript := webFile(t, tb, script, []byte("#!/bin/sh\necho deploy\n"), 0, 0, 0o755)
	hostOwn := filepath.Join(tb.Btrfs.Project, own)
	if err := os.Mkdir(hostOwn, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(hostOwn) })
	if err := os.WriteFile(filepath.Join(hostOwn, "rootf"), []byte("root's\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(hostOwn, int(uid), int(gid)); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"sh", "-c", "echo evil >> " + hostScript}, {"chown", fmt.Sprint(uid), hostScript}} {
		cmd := exec.Command("setpriv", append([]string{fmt.Sprintf("--reuid=%d", uid), fmt.Sprintf("--regid=%d", gid), "--init-groups"}, args...)...)
		if out, err := cmd.CombinedOutput(); err == nil {
			t.Fatalf("the control: the agent on the host: %q succeeded: %s", args, out)
		}
	}
	id := agentSandbox(t)

	agentShOK(t, id, true, fmt.Sprintf("chown %d %s && chown %d:%d %s/rootf", uid, script, uid, gid, own))
	out, errOut, code := ctlAs(t, rootAgent, "promote", id)
	if code != 4 || !strings.Contains(errOut, script+" (taken from root") || strings.Contains(errOut, own+"/rootf") {
		t.Errorf("the agent's promotion of root's script given to it: exit %d: %s%s; want 4, naming %s taken from root, not %s/rootf", code, out, errOut, script, own)
	}
	if u, g, m := ownerOf(t, hostScript); u != 0 || g != 0 || m != 0o755 {
		t.Errorf("the host's %s after the refused promotion: %d:%d mode %o; want root's, 755", script, u, g, m)
	}

	agentShOK(t, id, true, "chown 0 "+script)
	okAs(t, rootAgent, "promote", id)
	if u, g, _ := ownerOf(t, filepath.Join(hostOwn, "rootf")); u != uid || g != gid {
		t.Errorf("the host's %s/rootf after the promotion: %d:%d; want the agent's %d:%d", own, u, g, uid, gid)
	}
	if u, _, _ := ownerOf(t, hostScript); u != 0 {
		t.Errorf("the host's %s after the promotion: uid %d; want root's", script, u)
	}
}

// A member's renamed directory promotes with its owner. The member
// renames pkg (its own, as the whole project) to lib in its sandbox and
// promotes: the host has lib, the member's, with its file. Before, the
// promotion copied the tree, gave it its owner, then refused to set the
// directory's times because it was no longer root's ("not the one this
// promotion made"), and rolled back: no directory of anyone but root's
// could be renamed by a promotion.
func TestOwnersKeptAMembersRenamedDirectoryPromotes(t *testing.T) {
	const member = "hostile-ign"
	uid, gid := groupMember(t, member)
	reconfigure(t, "")
	path := memberProject(t, "owners-ren", uid, gid, map[string]string{"pkg/mod.py": "X = 1\n"})
	id := strings.TrimSpace(okAs(t, member, "create", "--quiet", "owners-ren"))
	okAs(t, member, "exec", id, "--", "mv", "pkg", "lib")
	if out := okAs(t, member, "diff", id); !strings.Contains(out, "R pkg/ -> lib\n") {
		t.Fatalf("the control: the diff does not list the rename:\n%s", out)
	}
	if out, errOut, code := ctlAs(t, member, "promote", id); code != 0 {
		t.Fatalf("the member's promotion of its renamed directory: exit %d: %s%s", code, out, errOut)
	}
	if data, err := os.ReadFile(filepath.Join(path, "lib", "mod.py")); err != nil || string(data) != "X = 1\n" {
		t.Errorf("the host's lib/mod.py after the promotion: %q, %v", data, err)
	}
	if u, g, _ := ownerOf(t, filepath.Join(path, "lib")); u != uid || g != gid {
		t.Errorf("the host's lib after the promotion: %d:%d; want the member's %d:%d", u, g, uid, gid)
	}
	if _, err := os.Lstat(filepath.Join(path, "pkg")); !os.IsNotExist(err) {
		t.Errorf("the host has pkg after the promotion (%v)", err)
	}
}

// A rename with one name the ignore rules leave out carries only the
// other. Project web leaves out __pycache__/ and *.env. Root inside the
// agent's sandbox writes bytecode over a kept file of the project and
// renames it into __pycache__, and renames the host's .env to a kept
// name. A rename was left out only if both its names were: both were
// promoted, so the bytecode reached the host's own __pycache__ (which
// Python runs in place of the source) and the host's .env was removed
// (where the host had no __pycache__, the promotion failed). Now the
// first is the kept file's removal alone, the second the kept name's
// add alone: the host has no __pycache__ and keeps its .env.
func TestHostileIgnoreARenameCarriesOnlyItsKeptName(t *testing.T) {
	tb := install(t)
	regularMember(t, rootAgent)
	reconfigure(t, fmt.Sprintf("users = [%q]\nignore = [\"__pycache__/\", \"*.env\"]\n", rootAgent))
	sfx := suffix()
	blob, env, leaked, pyc := "ign-blob-"+sfx+".bin", "ign-host-"+sfx+".env", "ign-leaked-"+sfx+".txt", "__pycache__/mod_"+sfx+".cpython-311.pyc"
	webFile(t, tb, blob, []byte("assets\n"), 0, 0, 0o644)
	hostEnv := webFile(t, tb, env, []byte("TOKEN=host\n"), 0, 0, 0o600)
	top := tb.Btrfs.Project
	t.Cleanup(func() { os.RemoveAll(filepath.Join(top, "__pycache__")); os.Remove(filepath.Join(top, leaked)) })
	// The host ran the project: it has a __pycache__ of its own.
	if err := os.Mkdir(filepath.Join(top, "__pycache__"), 0o755); err != nil {
		t.Fatal(err)
	}
	id := agentSandbox(t)
	agentShOK(t, id, true, fmt.Sprintf("printf 'evil bytecode' > %s && mv %s %s && mv %s %s", blob, blob, pyc, env, leaked))
	ok(t, "promote", id)
	if _, err := os.Lstat(filepath.Join(top, pyc)); !os.IsNotExist(err) {
		t.Errorf("the host has %s after the promotion (%v): the rules leave it out", pyc, err)
	}
	if _, err := os.Lstat(filepath.Join(top, blob)); !os.IsNotExist(err) {
		t.Errorf("the host has %s after the promotion (%v): its removal is kept", blob, err)
	}
	if data, err := os.ReadFile(hostEnv); err != nil || string(data) != "TOKEN=host\n" {
		t.Errorf("the host's %s after the promotion: %q, %v; want it as it was", env, data, err)
	}
	if data, err := os.ReadFile(filepath.Join(top, leaked)); err != nil || string(data) != "TOKEN=host\n" {
		t.Errorf("the host's %s after the promotion: %q, %v; want the kept name added", leaked, data, err)
	}
}
