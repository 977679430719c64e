package changewatch_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/cowfs/changewatch"
	"github.com/sandboxd/sandboxd/tests/testbed"
)

// On the testbed's zfs-fuse: what fanotify makes of a dataset's mountpoint,
// and whether `zfs get written@SNAP` (ZFS's "changed since") is there.
// It records what this testbed offers; it proves nothing of OpenZFS.
func TestZFSFuse(t *testing.T) {
	tb := testbed.Require(t)
	mnt := tb.ZFS.Mountpoint
	var st unix.Statfs_t
	must(t, unix.Statfs(mnt, &st))
	t.Logf("zfs-fuse %s: statfs type %#x fsid %v", mnt, st.Type, st.Fsid.Val)
	w, err := changewatch.NewWatcher(mnt)
	if err != nil {
		t.Logf("fanotify filesystem mark on zfs-fuse: %v", err)
		fd, ierr := unix.FanotifyInit(unix.FAN_CLASS_NOTIF|unix.FAN_CLOEXEC, unix.O_RDONLY)
		must(t, ierr)
		merr := unix.FanotifyMark(fd, unix.FAN_MARK_ADD|unix.FAN_MARK_MOUNT, unix.FAN_MODIFY|unix.FAN_CLOSE_WRITE, unix.AT_FDCWD, mnt)
		unix.Close(fd)
		t.Logf("fanotify mount mark (no FID, FAN_MODIFY|FAN_CLOSE_WRITE only) on zfs-fuse: %v", merr)
	} else {
		defer w.Close()
		p, err := w.Watch(mnt)
		must(t, err)
		m, err := w.Mark(p)
		must(t, err)
		if c, _ := w.Changed(p, m); c {
			t.Errorf("zfs-fuse: changed with nothing written")
		}
		must(t, os.WriteFile(filepath.Join(mnt, "changewatch.txt"), []byte("x"), 0o644))
		defer os.Remove(filepath.Join(mnt, "changewatch.txt"))
		c, err := w.Changed(p, m)
		must(t, err)
		t.Logf("fanotify filesystem mark on zfs-fuse: a write reported: %v", c)
		if !c {
			t.Errorf("zfs-fuse: a write not reported")
		}
	}
	snap := tb.ZFS.Project + "@changewatch"
	if out, err := exec.Command("zfs", "snapshot", snap).CombinedOutput(); err != nil {
		t.Fatalf("zfs snapshot: %v: %s", err, out)
	}
	defer exec.Command("zfs", "destroy", snap).Run()
	out, err := exec.Command("zfs", "get", "-H", "-o", "value", "written@changewatch", tb.ZFS.Project).CombinedOutput()
	t.Logf("zfs get written@SNAP on zfs-fuse: %q, %v", out, err)
}
