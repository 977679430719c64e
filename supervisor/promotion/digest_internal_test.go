package promotion

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/cowfs"
)

// TestUnitDigestCoversContent: two different edits of one file have
// different digests, the same edit the same; a symlink's target and a
// file's mode count, times do not; a symlink on the way is not followed.
func TestUnitDigestCoversContent(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	write := func(name, data string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	changes := []cowfs.Change{{Kind: cowfs.Modified, Type: cowfs.TypeFile, Path: "calc.py"}}
	sum := func() string {
		t.Helper()
		d, err := digest(ctx, changes, dir)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	write("calc.py", "return a + b\n")
	first := sum()
	if again := sum(); again != first {
		t.Fatalf("the same content hashes to %s and %s", first, again)
	}
	write("calc.py", "return a - b\n") // same size, other content
	second := sum()
	if second == first {
		t.Fatalf("two different edits of calc.py have the same digest %s", first)
	}
	if err := os.Chtimes(filepath.Join(dir, "calc.py"), time0, time0); err != nil {
		t.Fatal(err)
	}
	if d := sum(); d != second {
		t.Fatalf("a change of times alone changed the digest: %s, was %s", d, second)
	}
	if err := os.Chmod(filepath.Join(dir, "calc.py"), 0o755); err != nil {
		t.Fatal(err)
	}
	if d := sum(); d == second {
		t.Fatalf("a change of mode left the digest %s", d)
	}
	if listDigest(changes) == second {
		t.Fatal("the content digest is the list's")
	}

	// A symlink's target is hashed, not what it points to.
	if err := os.Symlink("calc.py", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	changes = []cowfs.Change{{Kind: cowfs.Added, Type: cowfs.TypeSymlink, Path: "link"}}
	toCalc := sum()
	write("calc.py", "other\n")
	if d := sum(); d != toCalc {
		t.Fatalf("the symlink's digest followed it: %s, was %s", d, toCalc)
	}
	os.Remove(filepath.Join(dir, "link"))
	if err := os.Symlink("/etc/passwd", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if d := sum(); d == toCalc {
		t.Fatal("another target, the same digest")
	}
	// A path through a symlink is refused, not read.
	if err := os.Symlink("/etc", filepath.Join(dir, "etc")); err != nil {
		t.Fatal(err)
	}
	changes = []cowfs.Change{{Kind: cowfs.Modified, Type: cowfs.TypeFile, Path: "etc/passwd"}}
	if d, err := digest(ctx, changes, dir); err == nil {
		t.Fatalf("a path through a symlink hashed to %s; want an error", d)
	}
	// A deleted path reads nothing; a cancelled context stops the work.
	changes = []cowfs.Change{{Kind: cowfs.Deleted, Type: cowfs.TypeFile, Path: "gone"}}
	sum()
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := digest(cctx, changes, dir); err == nil {
		t.Fatal("a cancelled digest returned no error")
	}
}

var time0 = time.Unix(1_000_000, 0)
