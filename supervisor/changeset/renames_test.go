package changeset

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/internal/ignore"
)

// A renamed directory whose tree holds what the rules leave out is opened:
// its old name removed, its new one added path by path, so leaveOut drops
// the ignored ones as any other (a promotion would copy the whole tree).
// A change below the new name is carried by the adds; a rename into the
// tree from outside keeps its removal. A rename into an ignored name
// keeps its removal alone, one out of an ignored name its add alone. A
// rename whose tree holds nothing left out stays a rename.
func TestOpenRenames(t *testing.T) {
	now := t.TempDir()
	for _, f := range []string{"lib/mod.py", "lib/__pycache__/mod.cpython-311.pyc", "lib/moved.txt", "docs2/a.md",
		"__pycache__/x.pyc", "config.txt", "kept/a"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(now, f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(now, f), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("/etc", filepath.Join(now, "lib", "etc")); err != nil {
		t.Fatal(err)
	}
	git, _ := ignore.Parse("__pycache__/\n")
	own, _ := ignore.Patterns([]string{"*.env"})
	rules := ignore.NewProject(own, git)
	changes := []cowfs.Change{
		{Path: "pkg", NewPath: "lib", Kind: cowfs.Renamed, Type: cowfs.TypeDir},
		{Path: "lib/mod.py", Kind: cowfs.Modified, Type: cowfs.TypeFile},
		{Path: "lib/__pycache__", Kind: cowfs.Added, Type: cowfs.TypeDir},
		{Path: "top.txt", NewPath: "lib/moved.txt", Kind: cowfs.Renamed, Type: cowfs.TypeFile},
		{Path: "docs", NewPath: "docs2", Kind: cowfs.Renamed, Type: cowfs.TypeDir},
		// Into an ignored path: its removal alone; out of one: its add.
		{Path: "blob.bin", NewPath: "__pycache__/x.pyc", Kind: cowfs.Renamed, Type: cowfs.TypeFile},
		{Path: "host.env", NewPath: "config.txt", Kind: cowfs.Renamed, Type: cowfs.TypeFile},
		{Path: "cache.env", NewPath: "kept", Kind: cowfs.Renamed, Type: cowfs.TypeDir},
	}
	opened, err := openRenames(context.Background(), rules, now, changes)
	if err != nil {
		t.Fatal(err)
	}
	kept, n := leaveOut(rules, opened)
	var got []string
	for _, c := range kept {
		got = append(got, string(c.Kind)+" "+c.Path+" "+c.NewPath)
	}
	slices.Sort(got)
	want := []string{
		"added config.txt ", "added kept ", "added kept/a ",
		"added lib ", "added lib/etc ", "added lib/mod.py ", "added lib/moved.txt ",
		"deleted blob.bin ", "deleted pkg ", "deleted top.txt ", "renamed docs docs2",
	}
	if !slices.Equal(got, want) || n != 2 {
		t.Errorf("kept %q, %d left out; want %q, 2", got, n, want)
	}
	if same, err := openRenames(context.Background(), ignore.NewProject(nil, nil), now, changes); err != nil || !slices.Equal(same, changes) {
		t.Errorf("no rules: %v, %v; want the changes as they were", same, err)
	}
}
