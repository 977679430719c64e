package escape

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/supervisor"
	"github.com/sandboxd/sandboxd/tests/testbed"
)

// python runs a Python program that exits 0 when its system call
// succeeded. /usr/bin/python3: root's own (pyenv) is under /root, which a
// sandbox does not see.
func python(program string) string {
	return "/usr/bin/python3 -c '" + program + "'"
}

// syscallOK is a Python prologue: libc with errno, and ok(r) exits 0 when
// r is not -1 (and prints the errno otherwise).
const syscallOK = "import ctypes, os, sys\n" +
	"libc = ctypes.CDLL(None, use_errno=True)\n" +
	"def ok(r):\n" +
	"    if r == -1:\n" +
	"        print(os.strerror(ctypes.get_errno())); sys.exit(1)\n"

func TestKernelSurfacesAreClosed(t *testing.T) {
	b := newBox(t, supervisor.CreateOptions{})
	for _, c := range []struct{ what, script string }{
		{"making an AF_VSOCK socket (to the hypervisor)", python("import socket; socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM)")},
		// io_uring_setup(1, &params): 425 on amd64 and arm64 alike.
		{"setting up an io_uring", python(syscallOK + "p = (ctypes.c_byte * 120)()\nok(libc.syscall(425, 1, p))")},
		{"personality(READ_IMPLIES_EXEC)", python(syscallOK + "ok(libc.personality(0x0400000))")},
		{"a netlink uevent socket", python("import socket; socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, 15)")},
	} {
		outside(t, nobody, c.what, c.script)
		for _, uid := range users {
			b.mustFail(t, uid, c.what, c.script)
		}
	}
	// What must keep working: ip's netlink, and sockets for loopback.
	if out, res := b.run(t, nobody, "ip -o link show lo && "+python("import socket; socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)")); res.Code != 0 {
		t.Errorf("netlink route and an IPv6 socket in the sandbox: %v: %s", res, out)
	}
}

// TestBtrfsVolumesCannotBeMadeInside: a subvolume or snapshot made in the
// sandbox's copy of the project would be a volume of its own, outside
// the sandbox's quota.
func TestBtrfsVolumesCannotBeMadeInside(t *testing.T) {
	tb := testbed.Require(t)
	b := newBox(t, supervisor.CreateOptions{DiskQuota: 32 << 20})
	ctl := filepath.Join(tb.Btrfs.Mount, fmt.Sprintf("escape-subvol-%d", os.Getpid()))
	outside(t, 0, "making a btrfs subvolume", "btrfs subvolume create "+ctl+" && btrfs subvolume snapshot "+ctl+" "+ctl+"-snap")
	outside(t, 0, "deleting a btrfs subvolume", "btrfs subvolume delete "+ctl+"-snap "+ctl)
	for _, uid := range users {
		b.mustFail(t, uid, "making a btrfs subvolume in the project", "btrfs subvolume create ./escape-sub")
		b.mustFail(t, uid, "snapshotting the project's copy", "btrfs subvolume snapshot . ./escape-snap")
		b.mustFail(t, uid, "enabling quotas", "btrfs quota enable .")
		b.mustFail(t, uid, "defragmenting the project's copy", "btrfs filesystem defragment -r .")
	}
	// The quota holds: the write that a subvolume would have carried
	// out of it stops at the quota.
	out, _ := b.run(t, 0, "mkdir -p escape-sub; dd if=/dev/zero of=escape-sub/big bs=1M count=64 2>&1; rm -rf escape-sub")
	if !strings.Contains(out, "Disk quota exceeded") && !strings.Contains(out, "No space left") {
		t.Errorf("ESCAPE: 64 MiB written under a 32 MiB quota: %s", out)
	}
	// Reflink copies, which share btrfs's ioctl type, still work.
	if out, res := b.run(t, 0, "cp --reflink=always index.html ./escape-reflink && rm -f ./escape-reflink"); res.Code != 0 {
		t.Errorf("a reflink copy in the project: %v: %s", res, out)
	}
}
