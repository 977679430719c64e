package promote

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/tests/testbed"
)

// attacker is the uid of the host user who can write into the project
// and races the daemon during a promotion.
const attacker = 1000

// attackerFile makes a file of the attacker's at p (mode 0644) and a hard
// link to it at keep, outside the tree, as the attacker keeps one to use
// the inode later: what the daemon does to the inode shows there.
func attackerFile(t *testing.T, p, keep string) {
	t.Helper()
	if err := os.WriteFile(p, []byte("mine\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(p, attacker, attacker); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(p, keep); err != nil {
		t.Fatal(err)
	}
}

// untouched fails t unless p is still the attacker's, mode 0644.
func untouched(t *testing.T, p string, why string) {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		t.Fatal(err)
	}
	if st.Uid != attacker || st.Mode&0o7777 != 0o644 {
		t.Fatalf("%s: the attacker's file is now owned by %d, mode %o; want it untouched (%d, 644)", why, st.Uid, st.Mode&0o7777, attacker)
	}
}

// setuidTool makes src/tool, a root-owned setuid file, as a sandbox's
// root can make in its own tree.
func setuidTool(t *testing.T, src string) {
	t.Helper()
	p := filepath.Join(src, "tool")
	if err := os.WriteFile(p, []byte("#!/bin/sh\necho tool\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(p, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := unix.Chmod(p, 0o4755); err != nil {
		t.Fatal(err)
	}
}

// TestApplyMetadataNeverChangesAnInodeInPlace: the sandbox changed only
// tool's mode (setuid, allowed by an admin); in the project the attacker
// has swapped in a file of theirs (`mv mine tool`). Apply must not chown
// or chmod the attacker's inode: tool is replaced by the sandbox's file,
// and the attacker's inode keeps its owner and mode.
func TestApplyMetadataNeverChangesAnInodeInPlace(t *testing.T) {
	src, dst, outside := applyTrees(t)
	victim(t, outside) // root only
	setuidTool(t, src)
	keep := filepath.Join(outside, "mine")
	attackerFile(t, filepath.Join(dst, "tool"), keep)

	meta := []cowfs.Change{{Kind: cowfs.Metadata, Type: cowfs.TypeFile, Path: "tool"}}
	if _, err := Apply(context.Background(), meta, src, dst); err != nil {
		t.Fatalf("Apply of tool's metadata: %v", err)
	}
	untouched(t, keep, "after Apply of a metadata change of tool")
	// The control: the change did arrive, on an inode of the daemon's.
	var st unix.Stat_t
	if err := unix.Lstat(filepath.Join(dst, "tool"), &st); err != nil || st.Uid != 0 || st.Mode&0o7777 != 0o4755 {
		t.Fatalf("tool in the target: uid %d mode %o (%v); want the sandbox's, 0 and 4755", st.Uid, st.Mode&0o7777, err)
	}
	if data, _ := os.ReadFile(filepath.Join(dst, "tool")); string(data) != "#!/bin/sh\necho tool\n" {
		t.Fatalf("tool in the target holds %q; want the sandbox's file", data)
	}
}

// swapOnce returns a test hook that, the first time step happens to an
// entry whose name ends in suffix, calls swap with its directory and name.
func swapOnce(t *testing.T, step, suffix string, swap func(dir int, name string)) {
	t.Helper()
	done := false
	testHook = func(s string, dir int, name string) {
		if s == step && strings.HasSuffix(name, suffix) && !done {
			done = true
			swap(dir, name)
		}
	}
	t.Cleanup(func() { testHook = func(string, int, string) {} })
}

// TestApplyTempFileSwappedBeforeItsMetadata: the attacker sees the
// temporary `.sandboxd-RAND-tool` appear and renames a file of theirs
// over it before the daemon sets its owner and mode. The attacker's inode
// must keep its owner and mode, and Apply must not put it in place of
// tool silently.
func TestApplyTempFileSwappedBeforeItsMetadata(t *testing.T) {
	src, dst, outside := applyTrees(t)
	victim(t, outside) // root only
	setuidTool(t, src)
	keep := filepath.Join(outside, "mine")
	attackerFile(t, filepath.Join(dst, "mine"), keep)
	swapOnce(t, "created", "-tool", func(dir int, name string) {
		if err := unix.Renameat(dir, "mine", dir, name); err != nil {
			t.Errorf("the attacker's swap: %v", err)
		}
	})
	added := []cowfs.Change{{Kind: cowfs.Added, Type: cowfs.TypeFile, Path: "tool"}}
	_, err := Apply(context.Background(), added, src, dst)
	untouched(t, keep, fmt.Sprintf("after Apply (%v)", err))
	if !errors.Is(err, ErrReplaced) || !strings.Contains(err.Error(), "tool") {
		t.Fatalf("Apply with its temporary file swapped: %v; want ErrReplaced naming tool", err)
	}
}

// TestApplyLinkSwappedBeforeItsOwner: the same race on a symlink's
// temporary name: the link the attacker put there is refused, not
// chowned.
func TestApplyLinkSwappedBeforeItsOwner(t *testing.T) {
	src, dst, outside := applyTrees(t)
	victim(t, outside) // root only
	if err := os.Symlink("target", filepath.Join(src, "l")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("theirs", filepath.Join(dst, "theirs")); err != nil {
		t.Fatal(err)
	}
	if err := unix.Lchown(filepath.Join(dst, "theirs"), attacker, attacker); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(dst, "theirs"), filepath.Join(outside, "theirs")); err != nil {
		t.Fatal(err)
	}
	swapOnce(t, "created", "-l", func(dir int, name string) {
		if err := unix.Renameat(dir, "theirs", dir, name); err != nil {
			t.Errorf("the attacker's swap: %v", err)
		}
	})
	_, err := Apply(context.Background(), []cowfs.Change{{Kind: cowfs.Added, Type: cowfs.TypeSymlink, Path: "l"}}, src, dst)
	var st unix.Stat_t
	if lerr := unix.Lstat(filepath.Join(outside, "theirs"), &st); lerr != nil || st.Uid != attacker {
		t.Fatalf("the attacker's link is now owned by %d (Apply: %v); want %d", st.Uid, err, attacker)
	}
	if !errors.Is(err, ErrReplaced) || !strings.Contains(err.Error(), "l") {
		t.Fatalf("Apply with the link's temporary name swapped: %v; want ErrReplaced", err)
	}
}

// TestApplyDirectorySwappedAfterMkdir: the attacker replaces a directory
// the daemon just made (rmdir, mkdir) by one of theirs. The daemon must
// not set its metadata nor write the children into it.
func TestApplyDirectorySwappedAfterMkdir(t *testing.T) {
	for _, renamed := range []bool{false, true} {
		t.Run(fmt.Sprintf("renamed=%v", renamed), func(t *testing.T) {
			src, dst, outside := applyTrees(t)
			victim(t, outside) // root only
			if err := os.MkdirAll(filepath.Join(src, "d"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(src, "d", "f"), []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
			swapOnce(t, "mkdir", "d", func(dir int, name string) {
				if err := unix.Unlinkat(dir, name, unix.AT_REMOVEDIR); err != nil {
					t.Errorf("the attacker's rmdir: %v", err)
				}
				if err := unix.Mkdirat(dir, name, 0o777); err != nil {
					t.Errorf("the attacker's mkdir: %v", err)
				}
				if err := unix.Fchownat(dir, name, attacker, attacker, 0); err != nil {
					t.Error(err)
				}
				if err := unix.Fchmodat(dir, name, 0o777, 0); err != nil {
					t.Error(err)
				}
			})
			changes := []cowfs.Change{
				{Kind: cowfs.Added, Type: cowfs.TypeDir, Path: "d"},
				{Kind: cowfs.Added, Type: cowfs.TypeFile, Path: "d/f"},
			}
			if renamed {
				changes = []cowfs.Change{{Kind: cowfs.Renamed, Type: cowfs.TypeDir, Path: "old", NewPath: "d"}}
			}
			_, err := Apply(context.Background(), changes, src, dst)
			var st unix.Stat_t
			if lerr := unix.Lstat(filepath.Join(dst, "d"), &st); lerr != nil || st.Uid != attacker || st.Mode&0o7777 != 0o777 {
				t.Fatalf("the attacker's directory d: uid %d mode %o (Apply: %v); want it untouched (%d, 777)", st.Uid, st.Mode&0o7777, err, attacker)
			}
			if !errors.Is(err, ErrReplaced) || !strings.Contains(err.Error(), "d") {
				t.Fatalf("Apply with d swapped after mkdir: %v; want ErrReplaced naming d", err)
			}
			if _, err := os.Lstat(filepath.Join(dst, "d", "f")); !os.IsNotExist(err) {
				t.Fatalf("d/f was written into the attacker's directory (%v)", err)
			}
		})
	}
}

// btrfsProject makes a project subvolume on the testbed's btrfs holding
// files, and a read-only snapshot of it (the rollback point).
func btrfsProject(t *testing.T, files map[string]string) (proj, rp string) {
	t.Helper()
	tb := testbed.Require(t)
	base := filepath.Join(tb.Btrfs.Mount, "promote-"+strings.NewReplacer("/", "-", " ", "_").Replace(t.Name()))
	if err := os.MkdirAll(base, 0o755); err != nil {
		t.Fatal(err)
	}
	proj, rp = filepath.Join(base, "proj"), filepath.Join(base, "rp")
	testbed.MustRun(t, "btrfs", "subvolume", "create", proj)
	t.Cleanup(func() {
		for _, v := range []string{rp, proj} {
			if _, err := os.Stat(v); err == nil {
				if out, err := exec.Command("btrfs", "subvolume", "delete", v).CombinedOutput(); err != nil {
					t.Errorf("cleaning up: %v: %s", err, out)
				}
			}
		}
		_ = os.RemoveAll(base)
	})
	writeFiles(t, proj, files)
	testbed.MustRun(t, "btrfs", "subvolume", "snapshot", "-r", proj, rp)
	return proj, rp
}

// writeFiles writes name → text below dir ("name/" makes a directory).
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, text := range files {
		p := filepath.Join(dir, name)
		if strings.HasSuffix(name, "/") {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestApplyDirectoryMetadataOnlyOnTheExpectedDirectory: a directory's
// metadata can only be set in place. The attacker moves the project's
// directory d away and puts one of theirs at d; Apply of d's metadata,
// told the rollback point, refuses, naming d, and the attacker's
// directory keeps its owner and mode. The control: onto the project's
// own d the same change is set.
func TestApplyDirectoryMetadataOnlyOnTheExpectedDirectory(t *testing.T) {
	proj, rp := btrfsProject(t, map[string]string{"d/": "", "d/x": "x\n"})
	src := t.TempDir()
	writeFiles(t, src, map[string]string{"d/": ""})
	if err := os.Chmod(filepath.Join(src, "d"), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(filepath.Join(src, "d"), 4321, 4321); err != nil {
		t.Fatal(err)
	}
	meta := []cowfs.Change{{Kind: cowfs.Metadata, Type: cowfs.TypeDir, Path: "d"}}
	if _, err := ApplyWith(context.Background(), meta, src, proj, ApplyOptions{Expected: rp}); err != nil {
		t.Fatalf("the control, d's metadata onto the project's own d: %v", err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(filepath.Join(proj, "d"), &st); err != nil || st.Uid != 4321 || st.Mode&0o7777 != 0o750 {
		t.Fatalf("the control: d is owned by %d, mode %o (%v); want 4321, 750", st.Uid, st.Mode&0o7777, err)
	}

	if err := os.Rename(filepath.Join(proj, "d"), filepath.Join(proj, "d.orig")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(proj, "d"), 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(filepath.Join(proj, "d"), attacker, attacker); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(proj, "d"), 0o777); err != nil {
		t.Fatal(err)
	}
	_, err := ApplyWith(context.Background(), meta, src, proj, ApplyOptions{Expected: rp})
	if lerr := unix.Lstat(filepath.Join(proj, "d"), &st); lerr != nil || st.Uid != attacker || st.Mode&0o7777 != 0o777 {
		t.Fatalf("the attacker's d: owned by %d, mode %o (Apply: %v); want it untouched (%d, 777)", st.Uid, st.Mode&0o7777, err, attacker)
	}
	if !errors.Is(err, ErrReplaced) || !strings.Contains(err.Error(), "directory d ") {
		t.Fatalf("Apply of d's metadata onto another directory: %v; want ErrReplaced naming d", err)
	}
}
