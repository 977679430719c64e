package promote

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/cowfs"
)

// The fuzz targets need no testbed, but the package's TestMain boots one:
// under -fuzz the coordinator and its workers run inside it.

// maxInput bounds the fuzz targets' inputs: Go minimizes an interesting
// input by trying it without each span of its bytes, which takes the
// square of its length in runs, and a few long ones leave a 10 s run no
// time to fuzz. Longer inputs are skipped; they are never interesting.
const maxInput = 256

// FuzzApplyPath: checkRel accepts a change's path only when it is
// relative, clean, free of ".." elements and local (filepath.IsLocal);
// a refusal wraps ErrUnsafePath. Apply of one change with an accepted
// path, on a small tree whose source and target hold symlinks out of it,
// changes nothing outside the target (a sibling directory and the source
// stay as they were), keeps the target's root, and when it succeeds does
// what the change says.
func FuzzApplyPath(f *testing.F) {
	for _, s := range []struct {
		kind    byte
		p, newP string
	}{
		{0, "a", ""}, {0, "d", ""}, {0, "d/b", ""}, {0, "esc", ""}, {0, "esc/keep", ""}, {0, "abs/keep", ""},
		{1, "a", ""}, {1, "d/e/c", ""}, {1, "s", ""}, {1, "s/keep", ""}, {1, "new", ""}, {1, "d/e", ""},
		{2, "d", ""}, {2, "esc", ""}, {3, "d/b", "d/e/c2"}, {3, "a", "esc/a"}, {3, "d", "e"},
		{0, "../outside/keep", ""}, {0, "/etc", ""}, {0, "a/../../outside", ""}, {0, "", ""},
		{0, ".", ""}, {2, ".", ""}, {0, "d/./b", ""}, {0, "d//b", ""}, {0, "d/", ""}, {1, "a\x00b", ""},
	} {
		f.Add(s.kind, s.p, s.newP)
	}
	base := scratchDir(f)
	f.Fuzz(func(t *testing.T, kind byte, p, newP string) {
		if len(p)+len(newP) > maxInput {
			return
		}
		checkRelProps(t, p)
		c := cowfs.Change{Path: p}
		switch kind % 4 {
		case 0:
			c.Kind = cowfs.Deleted
		case 1:
			c.Kind = cowfs.Added
		case 2:
			c.Kind = cowfs.Metadata
		case 3:
			c.Kind, c.NewPath = cowfs.Renamed, newP
			checkRelProps(t, newP)
			if checkRel(newP) != nil {
				return
			}
		}
		if checkRel(p) != nil || !inTree(p) || c.Kind == cowfs.Renamed && !inTree(newP) {
			return
		}
		if kind&4 != 0 {
			c.Type = cowfs.TypeDir
		}
		applyOne(t, base, c)
	})
}

// inTree says whether p starts with a name of applyOne's trees: other
// paths only fail, early and alike.
func inTree(p string) bool {
	first, _, _ := strings.Cut(p, "/")
	return slices.Contains([]string{".", "a", "d", "e", "s", "abs", "esc", "new"}, first)
}

func checkRelProps(t *testing.T, p string) {
	t.Helper()
	err := checkRel(p)
	if err != nil {
		if !errors.Is(err, ErrUnsafePath) || !utf8.ValidString(err.Error()) {
			t.Fatalf("checkRel(%q): %q does not wrap ErrUnsafePath or is not valid UTF-8", p, err)
		}
		return
	}
	if path.IsAbs(p) || path.Clean(p) != p || !filepath.IsLocal(p) || slices.Contains(strings.Split(p, "/"), "..") {
		t.Fatalf("checkRel accepted %q: not a relative, clean, local path free of \"..\"", p)
	}
}

// applyOne applies c on a fresh small tree below base and checks what
// changed.
func applyOne(t *testing.T, base string, c cowfs.Change) {
	t.Helper()
	root, err := os.MkdirTemp(base, "t")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(root)
	src, dst, out := filepath.Join(root, "src"), filepath.Join(root, "dst"), filepath.Join(root, "outside")
	mk := func(dir string, entries ...string) {
		for _, e := range entries {
			name, target, link := strings.Cut(e, " -> ")
			p := filepath.Join(dir, name)
			switch {
			case link:
				err = os.Symlink(strings.ReplaceAll(target, "OUT", out), p)
			case strings.HasSuffix(name, "/"):
				err = os.Mkdir(p, 0o755)
			default:
				err = os.WriteFile(p, []byte(dir+"/"+name), 0o644)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	mk(root, "src/", "dst/", "outside/")
	mk(out, "keep", "sub/", "sub/keep")
	mk(src, "a", "d/", "d/b", "d/e/", "d/e/c", "d/e/c2", "e/", "e/x", "new", "s -> ../outside", "abs -> OUT")
	mk(dst, "a", "d/", "d/b", "d/x", "esc -> ../outside", "abs -> OUT", "s", "e")
	var rootSt unix.Stat_t
	if err := unix.Lstat(dst, &rootSt); err != nil {
		t.Fatal(err)
	}
	outBefore, srcBefore, dstBefore := treeOf(t, out), treeOf(t, src), treeOf(t, dst)

	_, applyErr := Apply(context.Background(), []cowfs.Change{c}, src, dst)

	if got := treeOf(t, out); got != outBefore {
		t.Fatalf("Apply(%+v) changed the directory beside the target (err %v):\n%s\nwas\n%s", c, applyErr, got, outBefore)
	}
	if got := treeOf(t, src); got != srcBefore {
		t.Fatalf("Apply(%+v) changed the source (err %v):\n%s\nwas\n%s", c, applyErr, got, srcBefore)
	}
	var st unix.Stat_t
	if err := unix.Lstat(dst, &st); err != nil || st.Ino != rootSt.Ino || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		t.Fatalf("Apply(%+v) replaced or removed the target's root (err %v)", c, applyErr)
	}
	if applyErr != nil {
		return
	}
	switch c.Kind {
	case cowfs.Deleted:
		if _, ok := lookup(dst, c.Path); ok && c.Path != "." {
			t.Fatalf("Apply(%+v) succeeded, but %s is still in the target", c, c.Path)
		}
		// Everything else is still there.
		for _, line := range strings.Split(dstBefore, "\n") {
			name, _, _ := strings.Cut(line, " ")
			if name != "" && name != c.Path && !strings.HasPrefix(name, c.Path+"/") && !strings.Contains(treeOf(t, dst), line) {
				t.Fatalf("Apply(%+v) removed %s too", c, name)
			}
		}
	case cowfs.Added, cowfs.Renamed:
		p := c.Path
		if c.Kind == cowfs.Renamed {
			p = c.NewPath
			related := c.Path == c.NewPath || c.NewPath == "." || strings.HasPrefix(c.Path, c.NewPath+"/") || strings.HasPrefix(c.NewPath, c.Path+"/")
			if old, ok := lookup(dst, c.Path); ok && !related {
				t.Fatalf("Apply(%+v) succeeded, but the old path is still in the target: %s", c, old)
			}
		}
		want, inSrc := lookup(src, p)
		got, inDst := lookup(dst, p)
		if inSrc && inDst && strings.HasPrefix(want, "d") && c.Type != cowfs.TypeDir {
			// A directory listed as a file: made, its mode left to a
			// change of its metadata.
			got, want = got[:1], want[:1]
		}
		if !inSrc || !inDst || got != want {
			t.Fatalf("Apply(%+v) succeeded, but %s is %q in the target and %q (%v) in the source", c, p, got, want, inSrc)
		}
	}
}

// treeOf describes the tree at dir, one line an entry: its path, type and
// mode, and a file's content or a link's target. Symlinks are not followed.
func treeOf(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		fmt.Fprintf(&b, "%s %s\n", rel, describe(p, fi))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func describe(p string, fi fs.FileInfo) string {
	desc := fi.Mode().String()
	switch {
	case fi.Mode().IsRegular():
		data, _ := os.ReadFile(p)
		desc += " " + string(data)
	case fi.Mode()&fs.ModeSymlink != 0:
		target, _ := os.Readlink(p)
		desc += " -> " + target
	}
	return desc
}

// lookup describes rel below dir as treeOf does, reached through no
// symlink; false when it is not there that way.
func lookup(dir, rel string) (string, bool) {
	parts := strings.Split(rel, "/")
	for i := range parts {
		p := filepath.Join(dir, strings.Join(parts[:i+1], "/"))
		fi, err := os.Lstat(p)
		if err != nil || i < len(parts)-1 && !fi.IsDir() {
			return "", false
		}
		if i == len(parts)-1 {
			return describe(p, fi), true
		}
	}
	return "", false
}

// scratchDir is a directory for FuzzApplyPath's trees, removed at the
// end: in /dev/shm where that is a tmpfs, so that Apply's syncfs is cheap.
func scratchDir(f *testing.F) string {
	parent := os.TempDir()
	var sfs unix.Statfs_t
	if unix.Statfs("/dev/shm", &sfs) == nil && sfs.Type == unix.TMPFS_MAGIC && unix.Access("/dev/shm", unix.W_OK) == nil {
		parent = "/dev/shm"
	}
	dir, err := os.MkdirTemp(parent, "promote-fuzz")
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// FuzzPlan: plan refuses a change list exactly when a path (or a rename's
// new path) is refused by checkRel or a kind is unknown; otherwise every
// change is in its steps, removals deepest first, writes shallowest first,
// metadata deepest first and once a path, each in the list's order among
// paths of one depth.
//
// Its input is a change list, one change a line: a kind letter (a added,
// m modified, d deleted, r renamed, t metadata, anything else an unknown
// kind), a type letter (d a directory, anything else a file), the path
// and, for a rename, a tab and the new path.
func FuzzPlan(f *testing.F) {
	for _, s := range []string{
		"afa\nafb/c\nadb\ndfx/y/z\ndfx",
		"rdd\te\nafe/f\ntdd\ntf.\ndf e/g",
		"mfa\nmda\ndfa/b/c\nrfa/b\tc/d/e",
		"af../x", "af/etc", "afa//b", "af", "xfa", "rfa\t../b",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if len(s) > 2*maxInput {
			return
		}
		var changes []cowfs.Change
		for _, line := range strings.Split(s, "\n") {
			if len(line) < 2 {
				continue
			}
			c := cowfs.Change{Kind: map[byte]cowfs.ChangeKind{'a': cowfs.Added, 'm': cowfs.Modified, 'd': cowfs.Deleted, 'r': cowfs.Renamed, 't': cowfs.Metadata}[line[0]], Type: cowfs.TypeFile}
			if line[1] == 'd' {
				c.Type = cowfs.TypeDir
			}
			c.Path, c.NewPath, _ = strings.Cut(line[2:], "\t")
			changes = append(changes, c)
		}
		p, err := plan(changes)
		var wantErr bool
		var remove []string
		var put []putStep
		var meta []string
		for _, c := range changes {
			if checkRel(c.Path) != nil || c.Kind == cowfs.Renamed && checkRel(c.NewPath) != nil || c.Kind == "" ||
				c.Path == "." && (c.Kind == cowfs.Deleted || c.Kind == cowfs.Renamed) {
				wantErr = true
				break
			}
			switch c.Kind {
			case cowfs.Deleted:
				remove = append(remove, c.Path)
			case cowfs.Renamed:
				remove = append(remove, c.Path)
				put = append(put, putStep{c.NewPath, c.Type == cowfs.TypeDir})
				if c.Type == cowfs.TypeDir && !slices.Contains(meta, c.NewPath) {
					meta = append(meta, c.NewPath)
				}
			case cowfs.Added, cowfs.Modified:
				put = append(put, putStep{path: c.Path})
				if c.Type == cowfs.TypeDir && !slices.Contains(meta, c.Path) {
					meta = append(meta, c.Path)
				}
			case cowfs.Metadata:
				if !slices.Contains(meta, c.Path) {
					meta = append(meta, c.Path)
				}
			}
		}
		if wantErr {
			if err == nil {
				t.Fatalf("plan(%+v) accepted a change list with a bad path or kind", changes)
			}
			return
		}
		if err != nil {
			t.Fatalf("plan(%+v): %v", changes, err)
		}
		// Sorted (stably) by depth, each list holds what the changes say.
		deeper := func(a, b string) bool { return depth(a) > depth(b) }
		checkOrder(t, "removals", remove, p.remove, deeper)
		checkOrder(t, "metadata", meta, p.meta, deeper)
		putPaths := func(steps []putStep) []string {
			var out []string
			for _, s := range steps {
				out = append(out, fmt.Sprintf("%s %v", s.path, s.tree))
			}
			return out
		}
		checkOrder(t, "writes", putPaths(put), putPaths(p.put), func(a, b string) bool {
			return depth(a[:strings.LastIndexByte(a, ' ')]) < depth(b[:strings.LastIndexByte(b, ' ')])
		})
	})
}

// checkOrder: got is want, ordered so that no element comes after one it
// must precede (before), elements that neither precedes keeping want's
// order.
func checkOrder(t *testing.T, what string, want, got []string, before func(a, b string) bool) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %q; want the elements of %q", what, got, want)
	}
	sorted := slices.Clone(want)
	slices.SortStableFunc(sorted, func(a, b string) int {
		switch {
		case before(a, b):
			return -1
		case before(b, a):
			return 1
		}
		return 0
	})
	for i := range got {
		if i > 0 && before(got[i], got[i-1]) {
			t.Fatalf("%s: %q: %q comes after %q", what, got, got[i], got[i-1])
		}
	}
	if !slices.Equal(got, sorted) {
		t.Fatalf("%s: %q; want %q", what, got, sorted)
	}
}
