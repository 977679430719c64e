package sendstream_test

import (
	"syscall"
	"testing"
)

// populateBase fills a volume with what the changes of changeAll act on.
func populateBase(f files) {
	f.write("a.txt", []byte("hello\n"))
	f.write("big.bin", random(1, 256<<10))
	f.write("grow.txt", []byte("small\n"))
	f.write("shrink.txt", random(2, 64<<10))
	f.write("d/x", []byte("x\n"))
	f.write("d/y", []byte("y\n"))
	f.write("d/sub/z", []byte("z\n"))
	f.write("tree/a", []byte("a\n"))
	f.write("tree/b/c", []byte("c\n"))
	f.write("old.txt", []byte("old\n"))
	f.write("ren.txt", []byte("ren\n"))
	f.write("renmod.txt", []byte("renmod\n"))
	f.write("mv.txt", []byte("mv\n"))
	f.write("replace.txt", []byte("first\n"))
	f.write("xattr.txt", []byte("xattr\n"))
	f.setxattr("xattr.txt", "user.keep", "kept")
	f.setxattr("xattr.txt", "user.gone", "going")
	f.write("mode.txt", []byte("mode\n"))
	f.write("own.txt", []byte("own\n"))
	// Names btrfs receive --dump escapes.
	f.write("with space.txt", []byte("space\n"))
	f.write("tab\tname", []byte("tab\n"))
	f.write("caf\u00e9.txt", []byte("utf-8\n"))
	f.write(`back\slash`, []byte("backslash\n"))
}

// changeAll makes every kind of change a send stream carries.
func changeAll(f files) {
	// New entries: a file, a directory with a file, a symlink, a hard link,
	// a fifo, a socket and two devices, a sparse file, a clone.
	f.write("new.txt", []byte("new\n"))
	f.write("newdir/f", []byte("f\n"))
	f.symlink("a.txt", "link")
	f.link("a.txt", "hl")
	f.do(syscall.Mkfifo(f.path("fifo"), 0o644))
	f.mknod("sock", syscall.S_IFSOCK|0o755, 0, 0)
	f.mknod("chr", syscall.S_IFCHR|0o600, 1, 3)
	f.mknod("blk", syscall.S_IFBLK|0o640, 259, 300000)
	f.writeAt("sparse.bin", 0, random(3, 4096))
	f.writeAt("sparse.bin", 1<<20, random(4, 4096))
	f.reflink("big.bin", "clone.bin")

	// Renames: files, a file that also changes, a file into a new
	// directory, a directory with its children, then changes under it.
	f.rename("ren.txt", "renamed.txt")
	f.rename("renmod.txt", "renmod2.txt")
	f.writeAt("renmod2.txt", 7, []byte("more\n"))
	f.rename("mv.txt", "newdir/mv.txt")
	f.rename("d", "d2")
	f.writeAt("d2/x", 2, []byte("more x\n"))
	f.remove("d2/y")
	f.write("d2/sub/new", []byte("new in sub\n"))
	f.rename("tab\tname", "new\nline")

	// Deletes: a file, a tree.
	f.remove("old.txt")
	f.remove("tree")

	// A file replaced by another (a new inode at the same name).
	f.write("replace.tmp", []byte("second\n"))
	f.rename("replace.tmp", "replace.txt")

	// Metadata.
	f.setxattr("xattr.txt", "user.new", "new value")
	f.removexattr("xattr.txt", "user.gone")
	f.chmod("mode.txt", 0o600)
	f.chown("own.txt", 1000, 1001)
	f.chmod("caf\u00e9.txt", 0o640)

	// Content: grow, shrink, overwrite in the middle.
	f.truncate("grow.txt", 300000)
	f.truncate("shrink.txt", 100)
	f.writeAt("big.bin", 128<<10, random(5, 4096))
	f.writeAt("with space.txt", 0, []byte("SPACE"))
}

// volumes makes a subvolume, populates it, and returns read-only snapshots
// before (base) and after (snap) changeAll.
func volumes(t *testing.T, name string) (base, snap string) {
	vol := subvolume(t, name)
	f := files{t, vol}
	populateBase(f)
	base = snapshot(t, vol, name+"-base")
	changeAll(f)
	snap = snapshot(t, vol, name+"-snap")
	return base, snap
}
