package promote

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/cowfs"
)

// applyTrees makes src, dst and outside below a new temporary directory.
func applyTrees(t *testing.T) (src, dst, outside string) {
	t.Helper()
	root := t.TempDir()
	src, dst, outside = filepath.Join(root, "src"), filepath.Join(root, "dst"), filepath.Join(root, "outside")
	for _, d := range []string{src, dst, outside} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return src, dst, outside
}

// victim makes a root-owned file mode 0755 and returns its path.
func victim(t *testing.T, dir string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the victim is a root-owned file")
	}
	p := filepath.Join(dir, "victim")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(p, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func modeOf(t *testing.T, p string) uint32 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		t.Fatal(err)
	}
	return st.Mode
}

// TestApplyMetadataDoesNotFollowASymlink is issue 15's finding 1: a
// change of f's metadata alone (chmod 4755 in the sandbox), applied to a
// target where f has meanwhile become a symlink to a root-owned file
// outside the tree, must not chmod the symlink's target. Apply refuses,
// naming f, and the outside file keeps its mode.
func TestApplyMetadataDoesNotFollowASymlink(t *testing.T) {
	src, dst, outside := applyTrees(t)
	v := victim(t, outside)
	if err := os.WriteFile(filepath.Join(src, "f"), []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := unix.Chmod(filepath.Join(src, "f"), 0o4755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(v, filepath.Join(dst, "f")); err != nil {
		t.Fatal(err)
	}
	// The control: the same change onto a plain file does set the bits,
	// so the test sees a chmod that goes through.
	ctrlSrc, ctrlDst, _ := applyTrees(t)
	for _, d := range []string{ctrlSrc, ctrlDst} {
		if err := os.WriteFile(filepath.Join(d, "f"), nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Chmod(filepath.Join(ctrlSrc, "f"), 0o4755); err != nil {
		t.Fatal(err)
	}
	meta := []cowfs.Change{{Kind: cowfs.Metadata, Type: cowfs.TypeFile, Path: "f"}}
	if _, err := Apply(context.Background(), meta, ctrlSrc, ctrlDst); err != nil {
		t.Fatalf("the control, a metadata change onto a file: %v", err)
	}
	if m := modeOf(t, filepath.Join(ctrlDst, "f")); m&0o7777 != 0o4755 {
		t.Fatalf("the control: f is %o after the change; want 4755", m&0o7777)
	}

	_, err := Apply(context.Background(), meta, src, dst)
	if m := modeOf(t, v); m&0o7777 != 0o755 {
		t.Fatalf("the file outside the tree, behind the symlink f, is now mode %o (Apply: %v); want it untouched at 755", m&0o7777, err)
	}
	if err == nil || !errors.Is(err, ErrKindChanged) || !strings.Contains(err.Error(), "of f: it is a symlink in the target") {
		t.Fatalf("Apply of a metadata change onto a symlink: %v; want an error naming f that wraps ErrKindChanged", err)
	}
	if target, lerr := os.Readlink(filepath.Join(dst, "f")); lerr != nil || target != v {
		t.Fatalf("f in the target after the refusal: %q, %v; want the symlink left as it was", target, lerr)
	}
}

// TestApplyMetadataRefusesAnotherKind: a metadata change for a directory
// onto a file (or the other way round) is refused, naming the path.
func TestApplyMetadataRefusesAnotherKind(t *testing.T) {
	src, dst, _ := applyTrees(t)
	if err := os.Mkdir(filepath.Join(src, "d"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dst, "d"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Apply(context.Background(), []cowfs.Change{{Kind: cowfs.Metadata, Type: cowfs.TypeDir, Path: "d"}}, src, dst)
	if !errors.Is(err, ErrKindChanged) || !strings.Contains(err.Error(), "of d: it is a file in the target") {
		t.Fatalf("Apply of a directory's metadata onto a file: %v; want ErrKindChanged naming d", err)
	}
	if m := modeOf(t, filepath.Join(dst, "d")); m&0o7777 != 0o644 {
		t.Fatalf("d in the target is now mode %o; want 644", m&0o7777)
	}
}

// TestApplySetsMetadataOfSymlinksAndFiles: the fd-based metadata calls
// still set a file's owner, mode and times and a symlink's owner and
// times (on the link itself).
func TestApplySetsMetadataOfSymlinksAndFiles(t *testing.T) {
	src, dst, outside := applyTrees(t)
	v := victim(t, outside)
	if err := os.WriteFile(filepath.Join(src, "f"), []byte("x"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dst, "f"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{src, dst} {
		if err := os.Symlink(v, filepath.Join(d, "l")); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Lchown(filepath.Join(src, "l"), 1234, 1234); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(filepath.Join(src, "f"), 4321, 4321); err != nil {
		t.Fatal(err)
	}
	changes := []cowfs.Change{
		{Kind: cowfs.Metadata, Type: cowfs.TypeFile, Path: "f"},
		{Kind: cowfs.Metadata, Type: cowfs.TypeSymlink, Path: "l"},
	}
	if _, err := Apply(context.Background(), changes, src, dst); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(filepath.Join(dst, "f"), &st); err != nil || st.Mode&0o7777 != 0o640 || st.Uid != 4321 {
		t.Fatalf("f in the target: mode %o uid %d (%v); want 640, 4321", st.Mode&0o7777, st.Uid, err)
	}
	if err := unix.Lstat(filepath.Join(dst, "l"), &st); err != nil || st.Uid != 1234 {
		t.Fatalf("the link l in the target: uid %d (%v); want 1234", st.Uid, err)
	}
	if err := unix.Stat(v, &st); err != nil || st.Uid != 0 || st.Mode&0o7777 != 0o755 {
		t.Fatalf("the file the links point at: uid %d mode %o; want root's, 755", st.Uid, st.Mode&0o7777)
	}
}

// TestPrivilegedFindsSetIDDevicesAndCapabilities is the promotion part
// of issue 15's finding 10: a change set that would put a setuid or
// setgid file, a device node or a file with capabilities into the target
// is found, each path named with why (also inside a renamed directory);
// ApplyWith refusing privileged files writes none of them, and Apply
// without the option (the control) does write the setuid file and the
// device.
func TestPrivilegedFindsSetIDDevicesAndCapabilities(t *testing.T) {
	src, dst, outside := applyTrees(t)
	victim(t, outside) // root only
	write := func(name string, mode uint32) {
		t.Helper()
		p := filepath.Join(src, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := unix.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
	write("suid", 0o4755)
	write("sgid", 0o2755)
	write("plain", 0o755)
	write("moved/deep/suid", 0o4711)
	write("capped", 0o755)
	if out, err := exec.Command("setcap", "cap_net_bind_service+ep", filepath.Join(src, "capped")).CombinedOutput(); err != nil {
		t.Fatalf("setcap: %v: %s", err, out)
	}
	if err := unix.Mknod(filepath.Join(src, "null2"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(src, "shared"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Chmod(filepath.Join(src, "shared"), 0o2775); err != nil { // a set-gid directory: no privilege
		t.Fatal(err)
	}
	changes := []cowfs.Change{
		{Kind: cowfs.Added, Type: cowfs.TypeFile, Path: "suid"},
		{Kind: cowfs.Metadata, Type: cowfs.TypeFile, Path: "sgid"},
		{Kind: cowfs.Added, Type: cowfs.TypeFile, Path: "plain"},
		{Kind: cowfs.Renamed, Type: cowfs.TypeDir, Path: "old", NewPath: "moved"},
		{Kind: cowfs.Modified, Type: cowfs.TypeFile, Path: "capped"},
		{Kind: cowfs.Added, Type: cowfs.TypeDevice, Path: "null2"},
		{Kind: cowfs.Added, Type: cowfs.TypeDir, Path: "shared"},
	}
	found, err := Privileged(context.Background(), changes, src, "")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range found {
		got = append(got, p.String())
	}
	want := []string{"suid (setuid)", "sgid (setgid)", "moved/deep/suid (setuid)", "capped (file capabilities)", "null2 (character device)"}
	if strings.Join(got, "; ") != strings.Join(want, "; ") {
		t.Fatalf("Privileged found %q; want %q", got, want)
	}

	// Refused: none of them is written.
	for _, c := range []cowfs.Change{changes[0], changes[5]} {
		_, err := ApplyWith(context.Background(), []cowfs.Change{c}, src, dst, ApplyOptions{RefusePrivileged: true})
		if !errors.Is(err, ErrPrivileged) || !strings.Contains(err.Error(), c.Path) {
			t.Fatalf("ApplyWith refusing privileged files, %s: %v; want ErrPrivileged naming it", c.Path, err)
		}
		if _, err := os.Lstat(filepath.Join(dst, c.Path)); !os.IsNotExist(err) {
			t.Fatalf("%s is in the target after a refusal (%v)", c.Path, err)
		}
	}
	// The control: without the option both arrive as they are.
	if _, err := Apply(context.Background(), []cowfs.Change{changes[0], changes[5]}, src, dst); err != nil {
		t.Fatal(err)
	}
	if m := modeOf(t, filepath.Join(dst, "suid")); m&0o7777 != 0o4755 {
		t.Fatalf("the control: suid in the target is %o; want 4755", m&0o7777)
	}
	if m := modeOf(t, filepath.Join(dst, "null2")); m&unix.S_IFMT != unix.S_IFCHR {
		t.Fatalf("the control: null2 in the target is %o; want a character device", m)
	}
}

// TestPrivilegedNamesWhatTheChangesGiveToRoot: against the base, a path
// the change set makes root's (new and root's, or given to root or its
// group) is privileged; one root had already, or that stays another
// owner's, is not; without a base nothing of owners is.
func TestPrivilegedNamesWhatTheChangesGiveToRoot(t *testing.T) {
	base, src := t.TempDir(), t.TempDir()
	ownedFile(t, base, "roots", 0, 0)
	ownedFile(t, base, "users", 1000, 1000)
	ownedFile(t, base, "grouped", 1000, 1000)
	ownedFile(t, base, "kept", 1000, 1000)
	ownedFile(t, src, "roots", 0, 0)      // root's before: edited, stays root's
	ownedFile(t, src, "users", 0, 0)      // given to root
	ownedFile(t, src, "grouped", 1000, 0) // given to group root
	ownedFile(t, src, "kept", 1000, 1000) // another owner's still
	ownedFile(t, src, "new-root", 0, 0)   // new, root's
	ownedFile(t, src, "new-user", 1000, 1000)
	if err := os.Lchown(src, 1000, 1000); err != nil { // the tree's root, given away from root
		t.Fatal(err)
	}
	if err := os.Lchown(base, 1000, 1000); err != nil {
		t.Fatal(err)
	}
	var changes []cowfs.Change
	for _, n := range []string{"roots", "users", "grouped", "kept", "new-root", "new-user"} {
		changes = append(changes, cowfs.Change{Kind: cowfs.Modified, Type: cowfs.TypeFile, Path: n})
	}
	changes = append(changes, cowfs.Change{Kind: cowfs.Metadata, Type: cowfs.TypeDir, Path: "."})
	found, err := Privileged(context.Background(), changes, src, base)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range found {
		got = append(got, p.String())
	}
	want := []string{"users (given to root (was uid 1000))", "grouped (given to group root (was gid 1000))", "new-root (new, owned by root)"}
	if strings.Join(got, "; ") != strings.Join(want, "; ") {
		t.Errorf("Privileged against the base found %q; want %q", got, want)
	}
	// The tree's root given to root is named too.
	if err := os.Lchown(src, 0, 0); err != nil {
		t.Fatal(err)
	}
	found, err = Privileged(context.Background(), changes[len(changes)-1:], src, base)
	if err != nil || len(found) != 1 || found[0].Path != "." {
		t.Errorf("the tree's root given to root: %v, %v; want it named", found, err)
	}
	// Without a base (a root promoter's), owners are no privilege.
	if found, err := Privileged(context.Background(), changes, src, ""); err != nil || len(found) != 0 {
		t.Errorf("Privileged without a base: %v, %v; want nothing", found, err)
	}
}

// TestPrivilegedForNamesWhatTheChangesGiveToOthers: for a promoter other
// than root, a path the change set gives to any uid but the promoter's,
// or to a group it is not in, is privileged (it could not do that on the
// host); another's file that keeps its owner is not, nor a group a
// set-gid directory of the host's passes on, but a directory made
// set-gid of such a group is; and another's file whose owner or mode
// the change set changed, unless the promoter could replace it on the
// host by its own.
func TestPrivilegedForNamesWhatTheChangesGiveToOthers(t *testing.T) {
	base, src := t.TempDir(), t.TempDir()
	const me, mine, web = 1000, 1000, 33
	for _, n := range []string{"mine", "webs", "to-web", "to-group", "to-root"} {
		ownedFile(t, base, n, me, mine)
	}
	ownedFile(t, base, "webs", web, web)
	ownedFile(t, src, "mine", me, mine)     // edited, stays the promoter's
	ownedFile(t, src, "webs", web, web)     // www-data's before: edited, stays www-data's
	ownedFile(t, src, "to-web", web, mine)  // given to www-data
	ownedFile(t, src, "to-group", me, web)  // given to group www-data
	ownedFile(t, src, "to-root", 0, 0)      // given to root
	ownedFile(t, src, "new-web", web, web)  // new, www-data's
	ownedFile(t, src, "new-staff", me, 50)  // new, of a group of the promoter's
	ownedFile(t, src, "new-mine", me, mine) // new, the promoter's
	dir := func(root, name string, mode uint32) {
		p := filepath.Join(root, name)
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, me, web); err != nil {
			t.Fatal(err)
		}
		if err := unix.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
	// The host's shared is set-gid, of www-data: it passes that group on,
	// to a new directory in it too. Its plain one is not: made set-gid
	// in the sandbox, it passes nothing on, and is named.
	dir(base, "shared", 0o2775)
	dir(src, "shared", 0o2775)
	dir(src, "shared/sub", 0o2775)
	ownedFile(t, src, "shared/new", me, web)
	ownedFile(t, src, "shared/sub/new", me, web)
	dir(base, "plain", 0o775)
	dir(src, "plain", 0o2775)
	ownedFile(t, src, "plain/new", me, web)
	// Root's files: one given to the promoter, one made writable to all;
	// one in a directory of the promoter's, which it may replace on the
	// host by a copy of its own.
	ownedFile(t, base, "roots", 0, 0)
	ownedFile(t, src, "roots", me, mine)
	ownedFile(t, base, "widened", 0, 0)
	ownedFile(t, src, "widened", 0, 0)
	if err := os.Chmod(filepath.Join(src, "widened"), 0o666); err != nil {
		t.Fatal(err)
	}
	for _, root := range []string{base, src} {
		if err := os.Mkdir(filepath.Join(root, "mydir"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(filepath.Join(root, "mydir"), me, mine); err != nil {
			t.Fatal(err)
		}
	}
	ownedFile(t, base, "mydir/roots", 0, 0)
	ownedFile(t, src, "mydir/roots", me, mine)
	var changes []cowfs.Change
	for _, n := range []string{"mine", "webs", "to-web", "to-group", "to-root", "new-web", "new-staff", "new-mine",
		"shared/new", "shared/sub", "shared/sub/new", "plain", "plain/new", "roots", "widened", "mydir/roots"} {
		changes = append(changes, cowfs.Change{Kind: cowfs.Modified, Type: cowfs.TypeFile, Path: n})
	}
	found, err := PrivilegedFor(context.Background(), changes, src, base, Promoter{UID: me, GIDs: []uint32{mine, 50}})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range found {
		got = append(got, p.String())
	}
	want := []string{
		"to-web (given to uid 33 (was uid 1000), not the promoter's (uid 1000))",
		"to-group (given to group gid 33 (was gid 1000), not the promoter's (uid 1000))",
		"to-root (given to root (was uid 1000), not the promoter's (uid 1000))",
		"new-web (new, owned by uid 33, not the promoter's (uid 1000))",
		"plain (made set-gid, of group gid 33, not the promoter's (uid 1000))",
		"plain/new (new, of group gid 33, not the promoter's (uid 1000))",
		"roots (taken from root (was 0:0, now 1000:1000), not the promoter's (uid 1000) to change)",
		"widened (mode of root's changed from 0644 to 0666, not the promoter's (uid 1000) to change)",
	}
	if strings.Join(got, "; ") != strings.Join(want, "; ") {
		t.Errorf("PrivilegedFor found %q; want %q", got, want)
	}
	if _, err := PrivilegedFor(context.Background(), changes, src, "", Promoter{UID: me}); err == nil {
		t.Errorf("PrivilegedFor without a base: no error")
	}
}

// A renamed directory of another owner than the daemon's is applied: the
// tree's copy gives it its owner, and its metadata step finds that owner
// on the directory it made (not someone else's in its place).
func TestApplyRenamedDirectoryOfAnotherOwner(t *testing.T) {
	src, dst := t.TempDir(), t.TempDir()
	for _, root := range []string{src, dst} {
		if err := os.Chmod(root, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(dst, "pkg"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(src, "lib"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "lib", "mod.py"), []byte("X = 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"lib/mod.py", "lib"} {
		if err := os.Lchown(filepath.Join(src, p), 4321, 4321); err != nil {
			t.Fatal(err)
		}
	}
	changes := []cowfs.Change{{Path: "pkg", NewPath: "lib", Kind: cowfs.Renamed, Type: cowfs.TypeDir}}
	if _, err := Apply(context.Background(), changes, src, dst); err != nil {
		t.Fatalf("applying a rename of a directory of uid 4321: %v", err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(filepath.Join(dst, "lib"), &st); err != nil || st.Uid != 4321 {
		t.Errorf("lib after the rename: uid %d, %v; want 4321", st.Uid, err)
	}
	if _, err := os.Lstat(filepath.Join(dst, "pkg")); !os.IsNotExist(err) {
		t.Errorf("pkg after the rename: %v; want it gone", err)
	}
}

// ownedFile writes the file name in dir, owned by uid and gid.
func ownedFile(t *testing.T, dir, name string, uid, gid int) {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(p, uid, gid); err != nil {
		t.Fatal(err)
	}
}
