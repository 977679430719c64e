package changeset

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/internal/ignore"
)

// The change list less what the rules leave out: a rename goes only if
// both names are ignored, and an ignored entry under a directory whose
// deletion stays, stays.
func TestLeaveOut(t *testing.T) {
	git, _ := ignore.Parse("__pycache__/\n*.pyc\n")
	own, _ := ignore.Patterns([]string{"*.log"})
	rules := ignore.NewProject(own, git)
	changes := []cowfs.Change{
		{Path: "mod.py", Kind: cowfs.Modified, Type: cowfs.TypeFile},
		{Path: "__pycache__", Kind: cowfs.Added, Type: cowfs.TypeDir},
		{Path: "__pycache__/mod.cpython-311.pyc", Kind: cowfs.Added, Type: cowfs.TypeFile},
		{Path: "run.log", Kind: cowfs.Added, Type: cowfs.TypeFile},
		{Path: "a.log", NewPath: "a.txt", Kind: cowfs.Renamed, Type: cowfs.TypeFile},
		{Path: "b.log", NewPath: "c.log", Kind: cowfs.Renamed, Type: cowfs.TypeFile},
		{Path: "old", Kind: cowfs.Deleted, Type: cowfs.TypeDir},
		{Path: "old/__pycache__", Kind: cowfs.Deleted, Type: cowfs.TypeDir},
		{Path: "old/__pycache__/x.pyc", Kind: cowfs.Deleted, Type: cowfs.TypeFile},
		{Path: "lib/__pycache__", Kind: cowfs.Deleted, Type: cowfs.TypeDir},
	}
	kept, n := leaveOut(rules, changes)
	var paths []string
	for _, c := range kept {
		paths = append(paths, c.Path)
	}
	want := []string{"mod.py", "a.log", "old", "old/__pycache__", "old/__pycache__/x.pyc"}
	if !slices.Equal(paths, want) || n != 5 {
		t.Errorf("kept %q, %d left out; want %q, 5", paths, n, want)
	}
	if kept, n := leaveOut(ignore.NewProject(nil, nil), changes); len(kept) != len(changes) || n != 0 {
		t.Errorf("no rules: kept %d of %d, %d left out", len(kept), len(changes), n)
	}
}

// The daemon reads a project's rule file beneath its snapshot, through
// no symlink, a plain file of one link and at most ignore.MaxRulesBytes.
func TestReadRulesFile(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	read := func(name string) (string, bool, error) { return readRulesFile(ctx, root, name) }
	if _, found, err := read(".sandboxignore"); found || err != nil {
		t.Fatalf("none: found %v, %v", found, err)
	}
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(root, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("plain", "*.pyc\n")
	if text, found, err := read("plain"); !found || err != nil || text != "*.pyc\n" {
		t.Errorf("a plain file: %q, %v, %v", text, found, err)
	}
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("hunter2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(secret, filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../plain", filepath.Join(root, "d", "up")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(root, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(root, "plain"), filepath.Join(root, "hard")); err != nil {
		t.Fatal(err)
	}
	write("big", strings.Repeat("x\n", ignore.MaxRulesBytes/2+1))
	for name, want := range map[string]string{
		"link": "is a symlink", "d/up": "is a symlink", "fifo": "not a plain file", "d": "not a plain file",
		"hard": "hard links", "big": "over the", "../x": "opening",
	} {
		text, _, err := read(name)
		if err == nil || !strings.Contains(err.Error(), want) || text != "" {
			t.Errorf("%s: %q, %v; want an error saying %q", name, text, err, want)
		}
		if name == "big" && !errors.Is(err, ignore.ErrTooLarge) {
			t.Errorf("big: %v, want ErrTooLarge", err)
		}
	}
}
