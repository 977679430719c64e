package unidiff

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/cowfs"
)

// diffTrees makes an empty old and new tree, as a base and a sandbox's
// snapshot would be.
func diffTrees(t *testing.T) (oldRoot, newRoot string) {
	t.Helper()
	dir := t.TempDir()
	oldRoot, newRoot = filepath.Join(dir, "old"), filepath.Join(dir, "new")
	for _, d := range []string{oldRoot, newRoot} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return oldRoot, newRoot
}

// put writes a file of the given mode (whatever the umask), with its
// parent directories.
func put(t *testing.T, root, name, content string, mode os.FileMode) {
	t.Helper()
	p := filepath.Join(root, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

func symlink(t *testing.T, root, name, target string) {
	t.Helper()
	p := filepath.Join(root, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, p); err != nil {
		t.Fatal(err)
	}
}

func mkdir(t *testing.T, root, name string, mode os.FileMode) {
	t.Helper()
	p := filepath.Join(root, name)
	if err := os.MkdirAll(p, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

func unified(t *testing.T, changes []cowfs.Change, oldRoot, newRoot string, o Options) (string, error) {
	t.Helper()
	var out bytes.Buffer
	err := Write(context.Background(), &out, changes, oldRoot, newRoot, o)
	return out.String(), err
}

// wantDiff runs Write and compares its output with want.
func wantDiff(t *testing.T, changes []cowfs.Change, oldRoot, newRoot, want string) {
	t.Helper()
	got, err := unified(t, changes, oldRoot, newRoot, Options{})
	if err != nil {
		t.Fatalf("Write: %v", err)
	}
	if got != want {
		t.Errorf("diff:\n%s\nwant:\n%s", got, want)
	}
}

func TestUnifiedModifiedText(t *testing.T) {
	oldRoot, newRoot := diffTrees(t)
	put(t, oldRoot, "src/main.go", "package main\n\nfunc main() {\n\tprintln(\"hello\")\n}\n", 0o644)
	put(t, newRoot, "src/main.go", "package main\n\nfunc main() {\n\tprintln(\"hello, world\")\n}\n", 0o644)
	// Modified in the list, but the same bytes: git shows nothing.
	put(t, oldRoot, "same.txt", "same\n", 0o644)
	put(t, newRoot, "same.txt", "same\n", 0o644)
	wantDiff(t, []cowfs.Change{
		{Path: "src/main.go", Kind: cowfs.Modified, Type: cowfs.TypeFile},
		{Path: "same.txt", Kind: cowfs.Modified, Type: cowfs.TypeFile},
	}, oldRoot, newRoot, `diff --git a/src/main.go b/src/main.go
--- a/src/main.go
+++ b/src/main.go
@@ -1,5 +1,5 @@
 package main
 
 func main() {
-	println("hello")
+	println("hello, world")
 }
`)
}

func TestUnifiedContextLines(t *testing.T) {
	oldRoot, newRoot := diffTrees(t)
	put(t, oldRoot, "f", "1\n2\n3\n4\n5\n", 0o644)
	put(t, newRoot, "f", "1\n2\nthree\n4\n5\n", 0o644)
	got, err := unified(t, []cowfs.Change{{Path: "f", Kind: cowfs.Modified}}, oldRoot, newRoot, Options{Context: 1})
	if err != nil {
		t.Fatal(err)
	}
	want := "diff --git a/f b/f\n--- a/f\n+++ b/f\n@@ -2,3 +2,3 @@\n 2\n-3\n+three\n 4\n"
	if got != want {
		t.Errorf("diff with one line of context:\n%s\nwant:\n%s", got, want)
	}
}

func TestUnifiedAddedAndDeleted(t *testing.T) {
	oldRoot, newRoot := diffTrees(t)
	put(t, newRoot, "docs/NEW.md", "# New\n\nHello.\n", 0o644)
	put(t, newRoot, "run.sh", "#!/bin/sh\necho hi", 0o755)
	put(t, newRoot, "empty", "", 0o644)
	put(t, oldRoot, "old.txt", "bye\n", 0o600)
	wantDiff(t, []cowfs.Change{
		{Path: "docs/NEW.md", Kind: cowfs.Added, Type: cowfs.TypeFile},
		{Path: "run.sh", Kind: cowfs.Added, Type: cowfs.TypeFile},
		{Path: "empty", Kind: cowfs.Added, Type: cowfs.TypeFile},
		{Path: "old.txt", Kind: cowfs.Deleted, Type: cowfs.TypeFile},
	}, oldRoot, newRoot, `diff --git a/docs/NEW.md b/docs/NEW.md
new file mode 100644
--- /dev/null
+++ b/docs/NEW.md
@@ -0,0 +1,3 @@
+# New
+
+Hello.
diff --git a/run.sh b/run.sh
new file mode 100755
--- /dev/null
+++ b/run.sh
@@ -0,0 +1,2 @@
+#!/bin/sh
+echo hi
\ No newline at end of file
diff --git a/empty b/empty
new file mode 100644
diff --git a/old.txt b/old.txt
deleted file mode 100600
--- a/old.txt
+++ /dev/null
@@ -1 +0,0 @@
-bye
`)
}

func TestUnifiedBinary(t *testing.T) {
	oldRoot, newRoot := diffTrees(t)
	put(t, oldRoot, "logo.png", "\x89PNG\r\n\x1a\n\x00\x00one", 0o644)
	put(t, newRoot, "logo.png", "\x89PNG\r\n\x1a\n\x00\x00two", 0o644)
	put(t, newRoot, "new.bin", "a\x00b", 0o644)
	// Text on one side is enough: a NUL in either side's first 8000 bytes.
	put(t, oldRoot, "data", "text\n", 0o644)
	put(t, newRoot, "data", strings.Repeat("x", 7999)+"\x00", 0o644)
	// A NUL after 8000 bytes does not count: a text diff.
	put(t, oldRoot, "late", strings.Repeat("x", 8000)+"\n", 0o644)
	put(t, newRoot, "late", strings.Repeat("x", 8000)+"\n\x00\n", 0o644)
	// Binary, unchanged in the list's eyes only: nothing.
	put(t, oldRoot, "same.bin", "\x00\x01", 0o644)
	put(t, newRoot, "same.bin", "\x00\x01", 0o644)
	wantDiff(t, []cowfs.Change{
		{Path: "logo.png", Kind: cowfs.Modified, Type: cowfs.TypeFile},
		{Path: "new.bin", Kind: cowfs.Added, Type: cowfs.TypeFile},
		{Path: "data", Kind: cowfs.Modified, Type: cowfs.TypeFile},
		{Path: "late", Kind: cowfs.Modified, Type: cowfs.TypeFile},
		{Path: "same.bin", Kind: cowfs.Modified, Type: cowfs.TypeFile},
	}, oldRoot, newRoot, `diff --git a/logo.png b/logo.png
Binary files a/logo.png and b/logo.png differ
diff --git a/new.bin b/new.bin
new file mode 100644
Binary files /dev/null and b/new.bin differ
diff --git a/data b/data
Binary files a/data and b/data differ
diff --git a/late b/late
--- a/late
+++ b/late
@@ -1 +1,2 @@
 `+strings.Repeat("x", 8000)+`
+`+"\x00"+`
`)
}

func TestUnifiedTooLarge(t *testing.T) {
	oldRoot, newRoot := diffTrees(t)
	for _, p := range []string{filepath.Join(oldRoot, "big"), filepath.Join(newRoot, "big2"), filepath.Join(newRoot, "huge")} {
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Truncate(9 << 20); err != nil { // sparse
			t.Fatal(err)
		}
		f.Close()
		if err := os.Chmod(p, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The renamed one is compared all the same: unchanged, so only the
	// rename shows.
	wantDiff(t, []cowfs.Change{
		{Path: "huge", Kind: cowfs.Added, Type: cowfs.TypeFile},
		{Path: "big", NewPath: "big2", Kind: cowfs.Renamed, Type: cowfs.TypeFile},
	}, oldRoot, newRoot, `diff --git a/huge b/huge
new file mode 100644
File huge is too large to diff (9437184 bytes)
diff --git a/big b/big2
rename from big
rename to big2
`)
}

func TestUnifiedRenames(t *testing.T) {
	oldRoot, newRoot := diffTrees(t)
	put(t, oldRoot, "README", "read me\n", 0o644)
	put(t, newRoot, "README.md", "read me\n", 0o644)
	put(t, oldRoot, "util.go", "package x\n\nfunc f() {}\n", 0o644)
	put(t, newRoot, "lib/util.go", "package x\n\nfunc g() {}\n", 0o755)
	wantDiff(t, []cowfs.Change{
		{Path: "README", NewPath: "README.md", Kind: cowfs.Renamed, Type: cowfs.TypeFile},
		{Path: "util.go", NewPath: "lib/util.go", Kind: cowfs.Renamed, Type: cowfs.TypeFile},
		// The rename's diff shows this one's content and mode.
		{Path: "lib/util.go", Kind: cowfs.Modified, Type: cowfs.TypeFile},
	}, oldRoot, newRoot, `diff --git a/README b/README.md
rename from README
rename to README.md
diff --git a/util.go b/lib/util.go
old mode 100644
new mode 100755
rename from util.go
rename to lib/util.go
--- a/util.go
+++ b/lib/util.go
@@ -1,3 +1,3 @@
 package x
 
-func f() {}
+func g() {}
`)
}

// A rename over an existing file, then changed: the btrfs change list
// says Renamed and Modified; what the rename replaced shows as deleted.
func TestUnifiedRenameOverAFile(t *testing.T) {
	oldRoot, newRoot := diffTrees(t)
	put(t, oldRoot, "draft", "1\n", 0o644)
	put(t, oldRoot, "final", "old final\n", 0o644)
	put(t, newRoot, "final", "1\n2\n", 0o644)
	wantDiff(t, []cowfs.Change{
		{Path: "draft", NewPath: "final", Kind: cowfs.Renamed, Type: cowfs.TypeFile},
		{Path: "final", Kind: cowfs.Modified, Type: cowfs.TypeFile},
	}, oldRoot, newRoot, `diff --git a/draft b/final
rename from draft
rename to final
--- a/draft
+++ b/final
@@ -1 +1,2 @@
 1
+2
diff --git a/final b/final
deleted file mode 100644
--- a/final
+++ /dev/null
@@ -1 +0,0 @@
-old final
`)
}

// A file changed in a renamed directory is compared with its old place.
func TestUnifiedRenamedDirectory(t *testing.T) {
	oldRoot, newRoot := diffTrees(t)
	put(t, oldRoot, "src/main.c", "int x;\n", 0o644)
	put(t, oldRoot, "src/util.c", "int y;\n", 0o644)
	put(t, newRoot, "lib/main.c", "int x = 1;\n", 0o644)
	put(t, newRoot, "lib/util.c", "int y;\n", 0o644)
	wantDiff(t, []cowfs.Change{
		{Path: "lib/main.c", Kind: cowfs.Modified, Type: cowfs.TypeFile},
		{Path: "src", NewPath: "lib", Kind: cowfs.Renamed, Type: cowfs.TypeDir},
	}, oldRoot, newRoot, `diff --git a/src/main.c b/lib/main.c
rename from src/main.c
rename to lib/main.c
--- a/src/main.c
+++ b/lib/main.c
@@ -1 +1 @@
-int x;
+int x = 1;
renamed directory src/ to lib/
`)
}

func TestUnifiedModeChange(t *testing.T) {
	oldRoot, newRoot := diffTrees(t)
	put(t, oldRoot, "build.sh", "make\n", 0o644)
	put(t, newRoot, "build.sh", "make\n", 0o755)
	// Times only: git shows nothing.
	put(t, oldRoot, "touched", "x\n", 0o644)
	put(t, newRoot, "touched", "x\n", 0o644)
	// Mode and content.
	put(t, oldRoot, "both", "a\n", 0o644)
	put(t, newRoot, "both", "b\n", 0o600)
	wantDiff(t, []cowfs.Change{
		{Path: "build.sh", Kind: cowfs.Metadata, Type: cowfs.TypeFile},
		{Path: "touched", Kind: cowfs.Metadata, Type: cowfs.TypeFile},
		{Path: "both", Kind: cowfs.Modified, Type: cowfs.TypeFile},
	}, oldRoot, newRoot, `diff --git a/build.sh b/build.sh
old mode 100644
new mode 100755
diff --git a/both b/both
old mode 100644
new mode 100600
--- a/both
+++ b/both
@@ -1 +1 @@
-a
+b
`)
}

// A promotion carries owners, which git does not show: a changed owner
// is named ("old owner"/"new owner", "owner of directory P/ changed"),
// and a new path's where it is not its directory's (a file a sandbox's
// root made root's in its owner's directory).
func TestUnifiedOwnerChange(t *testing.T) {
	oldRoot, newRoot := diffTrees(t)
	chown := func(root, name string, id int) {
		if err := os.Lchown(filepath.Join(root, name), id, id); err != nil {
			t.Fatal(err)
		}
	}
	for _, root := range []string{oldRoot, newRoot} {
		mkdir(t, root, "d", 0o755)
		put(t, root, "given", "x\n", 0o644)
		chown(root, "given", 1000)
		chown(root, "d", 1000)
		chown(root, ".", 1000)
	}
	chown(newRoot, "given", 0)
	chown(newRoot, "d", 33)
	put(t, newRoot, "made", "root\n", 0o644) // root's, in a directory of uid 1000
	put(t, newRoot, "mine", "mine\n", 0o644)
	chown(newRoot, "mine", 1000)
	mkdir(t, newRoot, "d/sub", 0o755)
	wantDiff(t, []cowfs.Change{
		{Path: "given", Kind: cowfs.Metadata, Type: cowfs.TypeFile},
		{Path: "d", Kind: cowfs.Metadata, Type: cowfs.TypeDir},
		{Path: "made", Kind: cowfs.Added, Type: cowfs.TypeFile},
		{Path: "mine", Kind: cowfs.Added, Type: cowfs.TypeFile},
		{Path: "d/sub", Kind: cowfs.Added, Type: cowfs.TypeDir},
	}, oldRoot, newRoot, `diff --git a/given b/given
old owner 1000:1000
new owner 0:0
owner of directory d/ changed from 1000:1000 to 33:33
diff --git a/made b/made
new file mode 100644
new file owner 0:0
--- /dev/null
+++ b/made
@@ -0,0 +1 @@
+root
diff --git a/mine b/mine
new file mode 100644
--- /dev/null
+++ b/mine
@@ -0,0 +1 @@
+mine
new directory d/sub/
owner of new directory d/sub/ is 0:0
`)
}

func TestUnifiedSymlinks(t *testing.T) {
	oldRoot, newRoot := diffTrees(t)
	symlink(t, oldRoot, "current", "releases/v1")
	symlink(t, newRoot, "current", "releases/v2")
	symlink(t, newRoot, "latest", "current")
	// A file that became a symlink: deleted, then added, as git shows it.
	put(t, oldRoot, "config", "debug = true\n", 0o644)
	symlink(t, newRoot, "config", "config.d/main")
	wantDiff(t, []cowfs.Change{
		{Path: "current", Kind: cowfs.Modified, Type: cowfs.TypeSymlink},
		{Path: "latest", Kind: cowfs.Added, Type: cowfs.TypeSymlink},
		{Path: "config", Kind: cowfs.Modified, Type: cowfs.TypeSymlink},
	}, oldRoot, newRoot, `diff --git a/current b/current
--- a/current
+++ b/current
@@ -1 +1 @@
-releases/v1
\ No newline at end of file
+releases/v2
\ No newline at end of file
diff --git a/latest b/latest
new file mode 120000
--- /dev/null
+++ b/latest
@@ -0,0 +1 @@
+current
\ No newline at end of file
diff --git a/config b/config
deleted file mode 100644
--- a/config
+++ /dev/null
@@ -1 +0,0 @@
-debug = true
diff --git a/config b/config
new file mode 120000
--- /dev/null
+++ b/config
@@ -0,0 +1 @@
+config.d/main
\ No newline at end of file
`)
}

func TestUnifiedDirectoriesAndSpecialFiles(t *testing.T) {
	oldRoot, newRoot := diffTrees(t)
	mkdir(t, newRoot, "cache", 0o755)
	mkdir(t, oldRoot, "tmp", 0o755)
	mkdir(t, oldRoot, "private", 0o755)
	mkdir(t, newRoot, "private", 0o700)
	mkdir(t, oldRoot, "same", 0o755)
	mkdir(t, newRoot, "same", 0o755)
	mkdir(t, oldRoot, "a", 0o755)
	mkdir(t, newRoot, "b", 0o755)
	// A fifo would block an open for reading: it must only be named. The
	// change list even calls the second one a file.
	for _, p := range []string{filepath.Join(newRoot, "pipe"), filepath.Join(newRoot, "liar")} {
		if err := unix.Mkfifo(p, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	wantDiff(t, []cowfs.Change{
		{Path: "cache", Kind: cowfs.Added, Type: cowfs.TypeDir},
		{Path: "tmp", Kind: cowfs.Deleted, Type: cowfs.TypeDir},
		{Path: "private", Kind: cowfs.Metadata, Type: cowfs.TypeDir},
		{Path: "same", Kind: cowfs.Metadata, Type: cowfs.TypeDir},
		{Path: ".", Kind: cowfs.Metadata, Type: cowfs.TypeDir},
		{Path: "a", NewPath: "b", Kind: cowfs.Renamed, Type: cowfs.TypeDir},
		{Path: "pipe", Kind: cowfs.Added, Type: cowfs.TypeFIFO},
		{Path: "liar", Kind: cowfs.Added, Type: cowfs.TypeFile},
	}, oldRoot, newRoot, `new directory cache/
deleted directory tmp/
mode of directory private/ changed from 0755 to 0700
renamed directory a/ to b/
new fifo pipe
new fifo liar
`)
}

func TestUnifiedQuotesNames(t *testing.T) {
	oldRoot, newRoot := diffTrees(t)
	put(t, oldRoot, "my notes.txt", "a\n", 0o644)
	put(t, newRoot, "my notes.txt", "b\n", 0o644)
	// A newline in a name must not start a line that looks like a header.
	put(t, newRoot, "x\n+++ b/etc", "c\n", 0o644)
	wantDiff(t, []cowfs.Change{
		{Path: "my notes.txt", Kind: cowfs.Modified, Type: cowfs.TypeFile},
		{Path: "x\n+++ b/etc", Kind: cowfs.Added, Type: cowfs.TypeFile},
	}, oldRoot, newRoot, "diff --git a/my notes.txt b/my notes.txt\n"+
		"--- a/my notes.txt\t\n"+
		"+++ b/my notes.txt\t\n"+
		"@@ -1 +1 @@\n-a\n+b\n"+
		`diff --git "a/x\n+++ b/etc" "b/x\n+++ b/etc"`+"\n"+
		"new file mode 100644\n"+
		"--- /dev/null\n"+
		`+++ "b/x\n+++ b/etc"`+"\t\n"+ // git's tab after a name with a space
		"@@ -0,0 +1 @@\n+c\n")
}

func TestUnifiedMaxBytes(t *testing.T) {
	oldRoot, newRoot := diffTrees(t)
	put(t, oldRoot, "f", "one\ntwo\nthree\n", 0o644)
	put(t, newRoot, "f", "one\nTWO\nthree\n", 0o644)
	changes := []cowfs.Change{
		{Path: "f", Kind: cowfs.Modified, Type: cowfs.TypeFile},
		// Not reached: it would fail, as it is in neither tree.
		{Path: "missing", Kind: cowfs.Modified, Type: cowfs.TypeFile},
	}
	// The header and the hunk's first lines are 56 bytes; the next line
	// does not fit in 60.
	got, err := unified(t, changes, oldRoot, newRoot, Options{MaxBytes: 60})
	if err != nil {
		t.Fatalf("Write: %v", err)
	}
	want := "diff --git a/f b/f\n--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n one\n" +
		"... the diff is cut here: it is longer than 60 bytes\n"
	if got != want {
		t.Errorf("cut diff:\n%s\nwant:\n%s", got, want)
	}
	// A limit the diff fits in changes nothing.
	got, err = unified(t, changes[:1], oldRoot, newRoot, Options{MaxBytes: 1000})
	if err != nil {
		t.Fatalf("Write: %v", err)
	}
	if want := "diff --git a/f b/f\n--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n one\n-two\n+TWO\n three\n"; got != want {
		t.Errorf("diff under its limit:\n%s\nwant:\n%s", got, want)
	}
}

func TestUnifiedRefusesUnsafePaths(t *testing.T) {
	oldRoot, newRoot := diffTrees(t)
	put(t, oldRoot, "ok", "a\n", 0o644)
	put(t, newRoot, "ok", "b\n", 0o644)
	for _, c := range []cowfs.Change{
		{Path: "../etc/passwd", Kind: cowfs.Modified, Type: cowfs.TypeFile},
		{Path: "a/../../etc/passwd", Kind: cowfs.Added, Type: cowfs.TypeFile},
		{Path: "a/..", Kind: cowfs.Deleted, Type: cowfs.TypeFile},
		{Path: "/etc/passwd", Kind: cowfs.Modified, Type: cowfs.TypeFile},
		{Path: "ok", NewPath: "../ok", Kind: cowfs.Renamed, Type: cowfs.TypeFile},
		{Path: "", Kind: cowfs.Added, Type: cowfs.TypeFile},
		{Path: "a//b", Kind: cowfs.Added, Type: cowfs.TypeFile},
	} {
		// The safe change first: nothing is written when any is unsafe.
		changes := []cowfs.Change{{Path: "ok", Kind: cowfs.Modified}, c}
		got, err := unified(t, changes, oldRoot, newRoot, Options{})
		if !errors.Is(err, ErrUnsafePath) {
			t.Errorf("change %+v: err = %v, want ErrUnsafePath", c, err)
			continue
		}
		bad := c.Path
		if c.Kind == cowfs.Renamed {
			bad = c.NewPath
		}
		if bad != "" && !strings.Contains(err.Error(), bad) {
			t.Errorf("change %+v: error %q does not name %s", c, err, bad)
		}
		if got != "" {
			t.Errorf("change %+v: wrote %q before refusing", c, got)
		}
	}
	_, err := unified(t, []cowfs.Change{{Path: "../x", Kind: cowfs.Added}}, oldRoot, newRoot, Options{})
	if want := `path "../x" has a ".." component`; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("err = %v, want it to say %s", err, want)
	}
}

// Symlinks in the sandbox's tree lead inside it, never to the host's
// files, whatever they point at.
func TestUnifiedSymlinkOutsideRoot(t *testing.T) {
	host, err := os.ReadFile("/etc/passwd")
	if err != nil || len(host) == 0 {
		t.Skip("no /etc/passwd to protect")
	}
	hostLine := strings.SplitN(string(host), "\n", 2)[0]
	noHost := func(t *testing.T, out string) {
		t.Helper()
		if strings.Contains(out, hostLine) {
			t.Errorf("the diff shows the host's /etc/passwd:\n%s", out)
		}
	}

	t.Run("directory symlink, nothing behind it", func(t *testing.T) {
		oldRoot, newRoot := diffTrees(t)
		symlink(t, newRoot, "a", "/etc")
		symlink(t, newRoot, "b", "../../../../../../etc")
		for _, p := range []string{"a/passwd", "b/passwd"} {
			out, err := unified(t, []cowfs.Change{{Path: p, Kind: cowfs.Added, Type: cowfs.TypeFile}}, oldRoot, newRoot, Options{})
			noHost(t, out)
			if !errors.Is(err, unix.ENOENT) || !strings.Contains(err.Error(), p) {
				t.Errorf("%s: err = %v, want no such file, naming %s", p, err, p)
			}
		}
	})

	t.Run("directory symlink to the tree's own etc", func(t *testing.T) {
		oldRoot, newRoot := diffTrees(t)
		symlink(t, newRoot, "a", "/etc")
		put(t, newRoot, "etc/passwd", "the sandbox's own\n", 0o644)
		out, err := unified(t, []cowfs.Change{{Path: "a/passwd", Kind: cowfs.Added, Type: cowfs.TypeFile}}, oldRoot, newRoot, Options{})
		if err != nil {
			t.Fatal(err)
		}
		noHost(t, out)
		want := "diff --git a/a/passwd b/a/passwd\nnew file mode 100644\n--- /dev/null\n+++ b/a/passwd\n@@ -0,0 +1 @@\n+the sandbox's own\n"
		if out != want {
			t.Errorf("diff:\n%s\nwant:\n%s", out, want)
		}
	})

	t.Run("last component a symlink, called a file", func(t *testing.T) {
		oldRoot, newRoot := diffTrees(t)
		put(t, oldRoot, "passwd", "x\n", 0o644)
		symlink(t, newRoot, "passwd", "/etc/passwd")
		out, err := unified(t, []cowfs.Change{
			{Path: "passwd", Kind: cowfs.Modified, Type: cowfs.TypeFile},
		}, oldRoot, newRoot, Options{})
		if err != nil {
			t.Fatal(err)
		}
		noHost(t, out)
		want := "diff --git a/passwd b/passwd\ndeleted file mode 100644\n--- a/passwd\n+++ /dev/null\n@@ -1 +0,0 @@\n-x\n" +
			"diff --git a/passwd b/passwd\nnew file mode 120000\n--- /dev/null\n+++ b/passwd\n@@ -0,0 +1 @@\n+/etc/passwd\n\\ No newline at end of file\n"
		if out != want {
			t.Errorf("diff:\n%s\nwant:\n%s", out, want)
		}
	})
}

func TestUnifiedErrorNamesPath(t *testing.T) {
	oldRoot, newRoot := diffTrees(t)
	put(t, newRoot, "here", "x\n", 0o644)
	_, err := unified(t, []cowfs.Change{{Path: "here", Kind: cowfs.Modified, Type: cowfs.TypeFile}}, oldRoot, newRoot, Options{})
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "diffing here: opening here in "+oldRoot) {
		t.Errorf("err = %v, want it to name here in the old tree", err)
	}
}

func TestUnifiedContextCancels(t *testing.T) {
	oldRoot, newRoot := diffTrees(t)
	put(t, oldRoot, "f", "a\n", 0o644)
	put(t, newRoot, "f", "b\n", 0o644)
	changes := []cowfs.Change{{Path: "f", Kind: cowfs.Modified, Type: cowfs.TypeFile}}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Write(ctx, &bytes.Buffer{}, changes, oldRoot, newRoot, Options{}); !errors.Is(err, context.Canceled) {
		t.Errorf("canceled before: err = %v, want context.Canceled", err)
	}

	// A diff that hangs is killed when the context ends.
	slow := filepath.Join(t.TempDir(), "slow-diff")
	if err := os.WriteFile(slow, []byte("#!/bin/sh\nexec sleep 60\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	defer func(p string) { diffProgram = p }(diffProgram)
	diffProgram = slow
	ctx, cancel = context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := Write(ctx, &bytes.Buffer{}, changes, oldRoot, newRoot, Options{})
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "diffing f") {
		t.Errorf("err = %v, want the deadline, naming f", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("Write took %v after its context ended", d)
	}
}

// The diff is a patch: git apply turns a copy of the old tree into the
// new one.
func TestUnifiedAppliesWithGit(t *testing.T) {
	git, err := exec.LookPath("git")
	if err != nil {
		t.Skip("no git")
	}
	oldRoot, newRoot := diffTrees(t)
	work := filepath.Join(t.TempDir(), "work")
	for _, root := range []string{oldRoot, work} {
		put(t, root, "main.go", "package main\n\nfunc main() {}\n", 0o644)
		put(t, root, "TODO", "everything\n", 0o644)
		put(t, root, "build.sh", "go build\n", 0o644)
		put(t, root, "doc.txt", "words\nmore words\n", 0o644)
		put(t, root, "my notes", "a\n", 0o644)
		symlink(t, root, "current", "v1")
	}
	put(t, newRoot, "main.go", "package main\n\nfunc main() { run() }\n", 0o644)
	put(t, newRoot, "run.go", "package main\n\nfunc run() {}\n", 0o644)
	put(t, newRoot, "build.sh", "go build\n", 0o755)
	put(t, newRoot, "docs/guide.txt", "words\nbetter words\n", 0o644)
	put(t, newRoot, "my notes", "b\n", 0o644)
	symlink(t, newRoot, "current", "v2")
	changes := []cowfs.Change{
		{Path: "main.go", Kind: cowfs.Modified, Type: cowfs.TypeFile},
		{Path: "run.go", Kind: cowfs.Added, Type: cowfs.TypeFile},
		{Path: "TODO", Kind: cowfs.Deleted, Type: cowfs.TypeFile},
		{Path: "build.sh", Kind: cowfs.Metadata, Type: cowfs.TypeFile},
		{Path: "docs", Kind: cowfs.Added, Type: cowfs.TypeDir},
		{Path: "doc.txt", NewPath: "docs/guide.txt", Kind: cowfs.Renamed, Type: cowfs.TypeFile},
		{Path: "my notes", Kind: cowfs.Modified, Type: cowfs.TypeFile},
		{Path: "current", Kind: cowfs.Modified, Type: cowfs.TypeSymlink},
	}
	patch, err := unified(t, changes, oldRoot, newRoot, Options{})
	if err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command(git, "apply", "-")
	cmd.Dir = work
	cmd.Env = append(os.Environ(), "GIT_CEILING_DIRECTORIES="+filepath.Dir(work))
	cmd.Stdin = strings.NewReader(patch)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git apply: %v\n%s\npatch:\n%s", err, out, patch)
	}
	if got, want := describeTree(t, work), describeTree(t, newRoot); got != want {
		t.Errorf("after git apply:\n%s\nwant:\n%s", got, want)
	}
}

// describeTree lists a tree's files, their modes and contents.
func describeTree(t *testing.T, root string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == root {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			b.WriteString(rel + " -> " + target + "\n")
		case d.IsDir():
			b.WriteString(rel + "/\n")
		default:
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			b.WriteString(rel + " " + info.Mode().String() + " " + string(data))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// The daemon is root, the diff is for a caller who is not: a file the
// caller could not read is named, its content not shown, on either side;
// what the caller may read (by owner, by a supplementary group, by the
// others' bits) is shown whole. Without a reader, root's view, all of it
// is shown: the control.
func TestUnifiedShowsOnlyWhatTheReaderCouldRead(t *testing.T) {
	oldRoot, newRoot := diffTrees(t)
	const uid, gid, other = 4242, 4343, 4444
	own := func(root, name string, u, g int) {
		t.Helper()
		if err := os.Lchown(filepath.Join(root, name), u, g); err != nil {
			t.Fatal(err)
		}
	}
	put(t, oldRoot, "secret", "root's secret\n", 0o600) // root's, deleted
	put(t, oldRoot, "public", "public\n", 0o644)
	put(t, oldRoot, "groupfile", "group's\n", 0o640)
	own(oldRoot, "groupfile", 0, gid)
	put(t, oldRoot, "mine", "mine\n", 0o600)
	own(oldRoot, "mine", uid, other)
	put(t, oldRoot, "shut/inner", "behind a closed door\n", 0o644)
	mkdir(t, oldRoot, "shut", 0o700)
	put(t, newRoot, "made", "made private\n", 0o600) // added, root's
	put(t, newRoot, "shut/inner", "behind a closed door, changed\n", 0o644)
	mkdir(t, newRoot, "shut", 0o700)
	changes := []cowfs.Change{
		{Path: "secret", Kind: cowfs.Deleted},
		{Path: "public", Kind: cowfs.Deleted},
		{Path: "groupfile", Kind: cowfs.Deleted},
		{Path: "mine", Kind: cowfs.Deleted},
		{Path: "shut/inner", Kind: cowfs.Modified},
		{Path: "made", Kind: cowfs.Added},
	}
	asRoot, err := unified(t, changes, oldRoot, newRoot, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"-root's secret", "+made private", "-behind a closed door"} {
		if !strings.Contains(asRoot, s) {
			t.Fatalf("root's diff lacks %q (the control):\n%s", s, asRoot)
		}
	}

	var out bytes.Buffer
	ctx := WithReader(context.Background(), Reader{UID: uid, GIDs: []uint32{other, gid}})
	if err := Write(ctx, &out, changes, oldRoot, newRoot, Options{}); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, s := range []string{"root's secret", "made private", "behind a closed door"} {
		if strings.Contains(got, s) {
			t.Errorf("the diff for uid %d shows %q, which it cannot read:\n%s", uid, s, got)
		}
	}
	for _, s := range []string{
		"diff --git a/secret b/secret\ndeleted file mode 100600\nContent not shown: a/secret is not readable by uid 4242\n",
		"Content not shown: b/made is not readable by uid 4242\n",
		"Content not shown: a/shut/inner is not readable by uid 4242\n",
		"-public\n", "-group's\n", "-mine\n",
	} {
		if !strings.Contains(got, s) {
			t.Errorf("the diff for uid %d lacks %q:\n%s", uid, s, got)
		}
	}
}
