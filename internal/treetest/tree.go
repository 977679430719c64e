// Package treetest describes trees of files as a user compares them, for
// tests that check that one tree is exactly another: a promoted project
// and its sandbox, a replica and its source, a rolled-back volume and its
// checkpoint.
package treetest

import (
	"crypto/sha256"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// Describe maps each entry below root (by its path relative to root) to
// its type and permissions, and a file's content (as text when short, a
// digest otherwise) or a symlink's target.
func Describe(t testing.TB, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if rel == "." {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		desc := info.Mode().String()
		switch {
		case info.Mode().IsRegular():
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			if len(data) <= 64 && utf8.Valid(data) {
				desc += fmt.Sprintf(" %q", data)
			} else {
				desc += fmt.Sprintf(" sha256:%x", sha256.Sum256(data))
			}
		case info.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			desc += " -> " + target
		}
		out[rel] = desc
		return nil
	})
	if err != nil {
		t.Fatalf("reading the tree %s: %v", root, err)
	}
	return out
}

// Diff lists how got differs from want, one line per path, sorted.
func Diff(got, want map[string]string) []string {
	var diffs []string
	for p, w := range want {
		if g, ok := got[p]; !ok {
			diffs = append(diffs, fmt.Sprintf("%s: missing (want %s)", p, w))
		} else if g != w {
			diffs = append(diffs, fmt.Sprintf("%s: %s, want %s", p, g, w))
		}
	}
	for p, g := range got {
		if _, ok := want[p]; !ok {
			diffs = append(diffs, fmt.Sprintf("%s: extra %s", p, g))
		}
	}
	slices.Sort(diffs)
	return diffs
}

// Equal fails t unless got and want describe the same tree.
func Equal(t testing.TB, what string, got, want map[string]string) {
	t.Helper()
	if d := Diff(got, want); len(d) > 0 {
		t.Fatalf("%s differs:\n  %s", what, strings.Join(d, "\n  "))
	}
}
