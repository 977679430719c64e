package promote

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
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
	root := t.TempDir()
	old, src, dst := filepath.Join(root, "old"), filepath.Join(root, "src"), filepath.Join(root, "dst")
	files := func(dir string, m map[string]string) {
		t.Helper()
		for name, text := range m {
			p := filepath.Join(dir, name)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	files(old, map[string]string{"a": "v1\n", "d/x": "x\n", "r/y": "y\n", "keep": "k\n"})
	files(src, map[string]string{"a": "v2\n", "n": "new\n", "moved/y": "y\n", "keep": "k\n"})
	if out, err := exec.Command("cp", "-a", old, dst).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v: %s", err, out)
	}
	changes := []cowfs.Change{
		{Kind: cowfs.Modified, Type: cowfs.TypeFile, Path: "a"},
		{Kind: cowfs.Added, Type: cowfs.TypeFile, Path: "n"},
		{Kind: cowfs.Deleted, Type: cowfs.TypeFile, Path: "d/x"},
		{Kind: cowfs.Deleted, Type: cowfs.TypeDir, Path: "d"},
		{Kind: cowfs.Renamed, Type: cowfs.TypeDir, Path: "r", NewPath: "moved"},
		{Kind: cowfs.Metadata, Type: cowfs.TypeDir, Path: "."},
	}
	if _, err := Apply(context.Background(), changes, src, dst); err != nil {
		t.Fatal(err)
	}
	// The control: the apply did change the target.
	if data, _ := os.ReadFile(filepath.Join(dst, "a")); string(data) != "v2\n" {
		t.Fatalf("a after the apply: %q", data)
	}
	// Someone else writes to the target meanwhile.
	files(dst, map[string]string{"theirs.txt": "mine\n", "keep": "edited\n"})

	if _, err := Restore(context.Background(), changes, old, dst); err != nil {
		t.Fatal(err)
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
