package promote

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/cowfs"
)

// TestRestoreUndoesOnlyTheChangesOwnPaths is the second half of issue
// 15's finding 4: undoing a promotion whose check failed must not discard
// what others wrote to the project meanwhile. Restore puts back exactly
// the paths the change set touched (a modified file, an added one, a
// deleted directory, a renamed one) from the rollback point, and leaves a
// file someone added and a file someone edited after the apply.
func TestRestoreUndoesOnlyTheChangesOwnPaths(t *testing.T) {
	dst, old := btrfsProject(t, map[string]string{"a": "v1\n", "d/x": "x\n", "r/y": "y\n", "keep": "k\n"})
	src := t.TempDir()
	writeFiles(t, src, map[string]string{"a": "v2\n", "n": "new\n", "moved/y": "y\n", "keep": "k\n"})
	changes := []cowfs.Change{
		{Kind: cowfs.Modified, Type: cowfs.TypeFile, Path: "a"},
		{Kind: cowfs.Added, Type: cowfs.TypeFile, Path: "n"},
		{Kind: cowfs.Deleted, Type: cowfs.TypeFile, Path: "d/x"},
		{Kind: cowfs.Deleted, Type: cowfs.TypeDir, Path: "d"},
		{Kind: cowfs.Renamed, Type: cowfs.TypeDir, Path: "r", NewPath: "moved"},
		{Kind: cowfs.Metadata, Type: cowfs.TypeDir, Path: "."},
	}
	if _, err := ApplyWith(context.Background(), changes, src, dst, ApplyOptions{Expected: old}); err != nil {
		t.Fatal(err)
	}
	// The control: the apply did change the target.
	if data, _ := os.ReadFile(filepath.Join(dst, "a")); string(data) != "v2\n" {
		t.Fatalf("a after the apply: %q", data)
	}
	// Someone else writes to the target meanwhile.
	writeFiles(t, dst, map[string]string{"theirs.txt": "mine\n", "keep": "edited\n"})
	if others, err := ChangedByOthers(context.Background(), changes, src, old, dst); err != nil || strings.Join(others, " ") != "keep theirs.txt" {
		t.Fatalf("ChangedByOthers: %q, %v; want keep and theirs.txt", others, err)
	}

	r, err := Restore(context.Background(), changes, src, old, dst)
	if err != nil || len(r.Kept) > 0 {
		t.Fatalf("Restore: %v (kept %q)", err, r.Kept)
	}
	want := map[string]string{"a": "v1\n", "d/x": "x\n", "r/y": "y\n", "theirs.txt": "mine\n", "keep": "edited\n"}
	for name, text := range want {
		if data, err := os.ReadFile(filepath.Join(dst, name)); err != nil || string(data) != text {
			t.Errorf("%s after the restore: %q, %v; want %q", name, data, err, text)
		}
	}
	for _, gone := range []string{"n", "moved"} {
		if _, err := os.Lstat(filepath.Join(dst, gone)); !os.IsNotExist(err) {
			t.Errorf("%s is still there after the restore (%v)", gone, err)
		}
	}
}

// TestRestoreKeepsWhatOthersMadeInsideThePromotionsDirectories: issue 15,
// the review of finding 4's fix. The promotion added directory add/ and
// renamed r/ to moved/; after the apply, others create files inside add/
// and inside moved/. Restore takes out only the entries
// the promotion wrote: their files stay, the directories holding them
// stay and are named in Kept, and r/'s old tree comes back. The control: a restore with no one else's files removes add/ and
// moved/ whole.
func TestRestoreKeepsWhatOthersMadeInsideThePromotionsDirectories(t *testing.T) {
	for _, others := range []bool{false, true} {
		t.Run(map[bool]string{false: "control", true: "others"}[others], func(t *testing.T) {
			dst, old := btrfsProject(t, map[string]string{"r/y": "y\n", "r/sub/z": "z\n"})
			src := t.TempDir()
			writeFiles(t, src, map[string]string{"add/f": "f\n", "add/deep/g": "g\n", "moved/y": "y\n", "moved/sub/z": "z\n"})
			changes := []cowfs.Change{
				{Kind: cowfs.Added, Type: cowfs.TypeDir, Path: "add"},
				{Kind: cowfs.Added, Type: cowfs.TypeFile, Path: "add/f"},
				{Kind: cowfs.Added, Type: cowfs.TypeDir, Path: "add/deep"},
				{Kind: cowfs.Added, Type: cowfs.TypeFile, Path: "add/deep/g"},
				{Kind: cowfs.Renamed, Type: cowfs.TypeDir, Path: "r", NewPath: "moved"},
			}
			if _, err := ApplyWith(context.Background(), changes, src, dst, ApplyOptions{Expected: old}); err != nil {
				t.Fatal(err)
			}
			theirs := map[string]string{"add/deep/theirs": "1\n", "moved/sub/theirs": "2\n"}
			if others {
				writeFiles(t, dst, theirs)
			}
			r, err := Restore(context.Background(), changes, src, old, dst)
			if err != nil {
				t.Fatal(err)
			}
			for name, text := range map[string]string{"r/y": "y\n", "r/sub/z": "z\n"} {
				if data, err := os.ReadFile(filepath.Join(dst, name)); err != nil || string(data) != text {
					t.Errorf("%s after the restore: %q, %v; want %q", name, data, err, text)
				}
			}
			if !others {
				for _, gone := range []string{"add", "moved"} {
					if _, err := os.Lstat(filepath.Join(dst, gone)); !os.IsNotExist(err) {
						t.Errorf("the control: %s is still there after the restore (%v)", gone, err)
					}
				}
				return
			}
			for name, text := range theirs {
				if data, err := os.ReadFile(filepath.Join(dst, name)); err != nil || string(data) != text {
					t.Errorf("their %s after the restore: %q, %v; want %q", name, data, err, text)
				}
			}
			for _, gone := range []string{"add/f", "add/deep/g", "moved/y", "moved/sub/z"} {
				if _, err := os.Lstat(filepath.Join(dst, gone)); !os.IsNotExist(err) {
					t.Errorf("the promotion's %s is still there after the restore (%v)", gone, err)
				}
			}
			slices.Sort(r.Kept)
			if strings.Join(r.Kept, " ") != "add add/deep moved moved/sub" {
				t.Errorf("Kept: %q; want the four directories holding their files", r.Kept)
			}
		})
	}
}
