package adopt

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// copyTestTree makes a tree of uid's with what a copy must keep.
func copyTestTree(t *testing.T, dir string, uid int) {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(dir, "sub", "deep"), 0o750))
	must(os.WriteFile(filepath.Join(dir, "sub", "deep", "f"), []byte("data\n"), 0o640))
	must(os.Link(filepath.Join(dir, "sub", "deep", "f"), filepath.Join(dir, "f-link")))
	must(os.Symlink("/etc/shadow", filepath.Join(dir, "to-shadow")))
	must(unix.Mkfifo(filepath.Join(dir, "fifo"), 0o600))
	must(os.Chmod(filepath.Join(dir, "fifo"), 0o620))
	must(unix.Setxattr(filepath.Join(dir, "f-link"), "user.origin", []byte("host"), 0))
	must(filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, uid)
	}))
}

func openDirFd(t *testing.T, p string) int {
	t.Helper()
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

// The copy by descriptor keeps owners, modes, hard links, xattrs, links
// and fifos, follows no link, and for a member refuses another's entry.
func TestCopyBeneathKeepsTheTreeAndRefusesAnothersEntry(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("run as root (make test does)")
	}
	base := t.TempDir()
	src, dst := filepath.Join(base, "src"), filepath.Join(base, "dst")
	copyTestTree(t, src, 1001)
	if err := os.Mkdir(dst, 0o700); err != nil {
		t.Fatal(err)
	}
	owner := uint32(1001)
	if err := copyBeneath(context.Background(), openDirFd(t, src), openDirFd(t, dst), src, &owner, ""); err != nil {
		t.Fatalf("copying uid 1001's tree for it: %v", err)
	}
	var a, b unix.Stat_t
	if err := unix.Lstat(filepath.Join(dst, "f-link"), &a); err != nil || unix.Lstat(filepath.Join(dst, "sub/deep/f"), &b) != nil {
		t.Fatal(err)
	}
	if a.Ino != b.Ino || a.Uid != 1001 || a.Mode&0o7777 != 0o640 {
		t.Errorf("the hard link: ino %d and %d, uid %d, mode %o; want one inode of uid 1001, 640", a.Ino, b.Ino, a.Uid, a.Mode&0o7777)
	}
	buf := make([]byte, 16)
	if n, err := unix.Getxattr(filepath.Join(dst, "f-link"), "user.origin", buf); err != nil || string(buf[:n]) != "host" {
		t.Errorf("the xattr: %q, %v", buf[:max(n, 0)], err)
	}
	if target, err := os.Readlink(filepath.Join(dst, "to-shadow")); err != nil || target != "/etc/shadow" {
		t.Errorf("the symlink: %q, %v", target, err)
	}
	var fifo, top unix.Stat_t
	if err := unix.Lstat(filepath.Join(dst, "fifo"), &fifo); err != nil || fifo.Mode&unix.S_IFMT != unix.S_IFIFO || fifo.Mode&0o777 != 0o620 || fifo.Uid != 1001 {
		t.Errorf("the fifo: mode %o uid %d, %v", fifo.Mode, fifo.Uid, err)
	}
	if err := unix.Lstat(dst, &top); err != nil || top.Uid != 1001 {
		t.Errorf("the top: uid %d, %v", top.Uid, err)
	}
	// A root file in it: refused for the member, named; kept for root.
	if err := os.WriteFile(filepath.Join(src, "sub", "root-file"), []byte("root's\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	dst2 := filepath.Join(base, "dst2")
	if err := os.Mkdir(dst2, 0o700); err != nil {
		t.Fatal(err)
	}
	err := copyBeneath(context.Background(), openDirFd(t, src), openDirFd(t, dst2), src, &owner, "")
	if !errors.Is(err, errForeign) || !strings.Contains(err.Error(), filepath.Join(src, "sub", "root-file")+" is owned by uid 0") {
		t.Errorf("copying a tree with root's file for uid 1001: %v; want it refused, named", err)
	}
	dst3 := filepath.Join(base, "dst3")
	if err := os.Mkdir(dst3, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := copyBeneath(context.Background(), openDirFd(t, src), openDirFd(t, dst3), src, nil, ""); err != nil {
		t.Fatalf("root's copy of it: %v", err)
	}
	var rf unix.Stat_t
	if err := unix.Lstat(filepath.Join(dst3, "sub", "root-file"), &rf); err != nil || rf.Uid != 0 || rf.Mode&0o777 != 0o600 {
		t.Errorf("root's file in root's copy: uid %d mode %o, %v", rf.Uid, rf.Mode&0o777, err)
	}
}
