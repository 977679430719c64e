package integration

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/tests/testbed"
)

// Issue 28's findings 6 and 7: a tenant's disk bounds, as a member of
// group sandboxd meets them (rootAgent, root inside its sandbox).

// writeMiB is a script that writes up to n MiB into path (with an fsync,
// so that a quota stops it there and then) and prints the bytes that went
// in.
func writeMiB(path string, n int) string {
	return fmt.Sprintf(`dd if=/dev/zero of=%[1]s bs=1M count=%[2]d conv=fsync 2>/dev/null; sync; stat -c %%s %[1]s 2>/dev/null || echo 0`, path, n)
}

// bytesOut reads the number a writeMiB script printed.
func bytesOut(t *testing.T, what, out string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(strings.TrimSpace(out), 10, 64)
	if err != nil {
		t.Fatalf("%s: %q is no byte count", what, out)
	}
	return n
}

// levelOneQgroups counts the level-1 qgroups (groups of quota groups) on
// the testbed's btrfs.
func levelOneQgroups(t *testing.T, tb *testbed.Info) int {
	t.Helper()
	uuid := strings.TrimSpace(testbed.MustRun(t, "findmnt", "-n", "-o", "UUID", "--target", tb.Btrfs.Mount))
	entries, err := os.ReadDir(filepath.Join("/sys/fs/btrfs", uuid, "qgroups"))
	if err != nil {
		return 0 // quotas off: none
	}
	n := 0
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "1_") {
			n++
		}
	}
	return n
}

const mib = 1 << 20

// Finding 7: `--disk 64M` stopped the project's write at 64 MiB, then 60
// MiB more went into /opt (the system layer had its own copy of the same
// quota), and a rollback to a checkpoint gave the volume a new tree with
// no quota at all. Now the volume, the layer and the checkpoints share
// one bound: the project's write and /opt's together stop at 64 MiB,
// also after a rollback, and the bound goes with the sandbox.
func TestHostileDiskQuotaBoundsTheProjectAndTheSystemLayerTogether(t *testing.T) {
	tb, _, _ := rootInsideSetup(t)
	groups := levelOneQgroups(t, tb)
	id := strings.TrimSpace(okAs(t, rootAgent, "create", "--quiet", "--disk", "64M", "web"))
	destroyed := false
	t.Cleanup(func() {
		if !destroyed {
			ctl(t, "", "destroy", id)
		}
	})
	proj := tb.Btrfs.Project

	// The control: /opt takes writes (8 MiB, removed again).
	if n := bytesOut(t, "8 MiB into /opt", agentShOK(t, id, true, writeMiB("/opt/probe", 8))); n != 8*mib {
		t.Fatalf("the control: 8 MiB into /opt wrote %d bytes; want all of it", n)
	}
	agentShOK(t, id, true, "rm /opt/probe && sync")

	// The project's write stops at the quota; /opt then takes what is left.
	inProject := bytesOut(t, "the project's write", agentShOK(t, id, true, writeMiB(proj+"/fill", 100)))
	if inProject < 56*mib || inProject > 66*mib {
		t.Fatalf("100 MiB into the project under --disk 64M: %d bytes went in; want about 64 MiB", inProject)
	}
	inOpt := bytesOut(t, "/opt's write", agentShOK(t, id, true, writeMiB("/opt/fill", 100)))
	t.Logf("--disk 64M: %.1f MiB into the project, then %.1f MiB into /opt", float64(inProject)/mib, float64(inOpt)/mib)
	if total := inProject + inOpt; total > 66*mib {
		t.Errorf("--disk 64M: the project took %d bytes and /opt %d more, %d in all; want 64 MiB in all", inProject, inOpt, total)
	}

	// A checkpoint, a rollback to it (a new tree for the volume), and the
	// same write again: the bound holds (what the old tree wrote is still
	// held by the checkpoint, and counted).
	agentShOK(t, id, true, "rm -f /opt/fill && sync")
	okAs(t, rootAgent, "checkpoint", id, "c1")
	okAs(t, rootAgent, "rollback", id, "c1")
	again := bytesOut(t, "the project's write after a rollback", agentShOK(t, id, true, writeMiB(proj+"/again", 100)))
	t.Logf("after a rollback: %.1f MiB more into the project", float64(again)/mib)
	if again > 10*mib {
		t.Errorf("after a checkpoint and a rollback to it, %d more bytes went into the project (it held %d); want the 64 MiB bound to hold", again, inProject)
	}

	// The bound goes with the sandbox.
	ok(t, "destroy", id)
	destroyed = true
	if after := levelOneQgroups(t, tb); after != groups {
		t.Errorf("level-1 qgroups: %d before the sandbox, %d after its destroy; want its group gone", groups, after)
	}
}

// copyIn is a script that copies up to all of src into dst with
// copy_file_range, as the finding did (a reflink where the kernel can),
// and prints the bytes copied and the error that stopped it, if any.
func copyIn(src, dst string) string {
	return fmt.Sprintf(`python3 -c '
import os, sys
s = os.open(%q, os.O_RDONLY); d = os.open(%q, os.O_WRONLY|os.O_CREAT, 0o600); n = 0
try:
    while True:
        c = os.copy_file_range(s, d, 1 << 30)
        if c == 0: break
        n += c
    print(n, "ok")
except OSError as e:
    print(n, e.strerror)
'`, src, dst)
}

// cacheBytes is a script that prints the bytes of the files in the cache.
const cacheBytes = `du -sb /var/cache/sandbox | cut -f1`

// Finding 6: with cache_quota = "32MiB" a plain write stopped at 31 MiB,
// but copy_file_range of 72 MiB from the project into the cache succeeded
// (a reflink, which btrfs charges to the volume that wrote the extent,
// not to the cache's), and stayed after the sandbox was destroyed;
// repeated, it filled the pool. Now the cache is a filesystem of its own
// (an ext4 image of cache_quota bytes): the same copy is refused (EXDEV,
// then ENOSPC for a copy by writes), and sandbox after sandbox the cache
// never holds more than its quota. The control: the same reflink from the
// project into the sandbox's own volume works.
func TestHostileCacheQuotaHoldsAgainstReflinksAndAcrossSandboxes(t *testing.T) {
	tb := install(t)
	uid, _ := regularMember(t, rootAgent)
	reconfigure(t, fmt.Sprintf("users = [%q]\n[limits]\ncache_quota = \"32MiB\"\n", rootAgent))
	okAs(t, rootAgent, "cache", "clear")
	t.Cleanup(func() { ctlAs(t, rootAgent, "cache", "clear") })
	webFile(t, tb, "big72", bytes.Repeat([]byte("cache quota "), 72*mib/12), 0, 0, 0o644)
	big := filepath.Join(tb.Btrfs.Project, "big72")
	const quota = 32 * mib

	id := agentSandbox(t)
	// The control: a reflink from the project into the sandbox's own
	// volume works, and so does copy_file_range of all of it.
	if out := agentShOK(t, id, true, fmt.Sprintf("cp --reflink=always %s %s.clone && echo cloned", big, big)); out != "cloned\n" {
		t.Fatalf("the control: cp --reflink=always into the sandbox's volume: %q", out)
	}
	if out := agentShOK(t, id, true, copyIn(big, big+".cfr")); out != fmt.Sprintf("%d ok\n", 72*mib/12*12) {
		t.Fatalf("the control: copy_file_range into the sandbox's volume: %q; want all of it", out)
	}

	// Into the cache: refused, as root inside and as the agent.
	out := agentShOK(t, id, true, copyIn(big, "/var/cache/sandbox/cfr"))
	t.Logf("copy_file_range of 72 MiB into a 32 MiB cache: %s", strings.TrimSpace(out))
	if strings.HasSuffix(out, " ok\n") {
		t.Errorf("copy_file_range of 72 MiB into a 32 MiB cache: %q; want it refused", out)
	}
	if out, errOut, code := agentSh(t, id, false, fmt.Sprintf("cp --reflink=always %s /var/cache/sandbox/ref", big)); code == 0 {
		t.Errorf("cp --reflink=always into the cache: exit 0 %q %q; want it refused", out, errOut)
	}

	// Sandbox after sandbox, each copying it in (cp falls back to writes
	// where it cannot clone), the cache holds no more than its quota.
	for i := range 3 {
		agentSh(t, id, false, fmt.Sprintf("cp %s /var/cache/sandbox/copy%d", big, i))
		held := bytesOut(t, "the cache's bytes", agentShOK(t, id, false, cacheBytes))
		t.Logf("sandbox %d: the cache holds %.1f MiB", i+1, float64(held)/mib)
		if held > quota {
			t.Errorf("sandbox %d: the cache holds %d bytes; want at most its quota, %d", i+1, held, quota)
		}
		ctl(t, "", "destroy", id)
		id = agentSandbox(t)
	}

	// A daemon restart finds the filesystem mounted and uses it as it is
	// (never a second mount of the same image), its files kept.
	testbed.MustRun(t, "systemctl", "restart", "sandboxd.service")
	after := agentSandbox(t)
	if out := agentShOK(t, after, false, "ls /var/cache/sandbox"); out != "cfr\ncopy0\ncopy1\ncopy2\nref\n" {
		t.Errorf("the cache after a daemon restart: %q; want the copies kept", out)
	}
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(mounts), fmt.Sprintf("/cachefs-u%d/fs ", uid)); n != 1 {
		t.Errorf("the agent's cache filesystem is mounted %d times after a restart; want once", n)
	}
}

// rewrites is a script that writes n MiB into path, then rewrites it n
// times in place, from one 64 KiB block further each time (dd
// conv=notrunc, with an fsync), and prints the file's size.
func rewrites(path string, mb, n int) string {
	blocks := mb * 16
	return fmt.Sprintf(`set -e; dd if=/dev/zero of=%[1]s bs=1M count=%[2]d conv=fsync 2>/dev/null
for k in $(seq 1 %[3]d); do dd if=/dev/zero of=%[1]s bs=64K seek=$k count=$((%[4]d-k)) conv=notrunc,fsync 2>/dev/null; done
sync; stat -c %%s %[1]s`, path, mb, n, blocks)
}

// poolUsed is the bytes in use on the testbed's btrfs pool, once what
// was written is committed.
func poolUsed(t *testing.T, tb *testbed.Info) int64 {
	t.Helper()
	unix.Sync()
	var st unix.Statfs_t
	if err := unix.Statfs(tb.Btrfs.Mount, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Blocks-st.Bfree) * st.Bsize
}

// Review of finding 6's fix: the cache's ext4 image was a file of the
// btrfs pool copied on write, and btrfs keeps an extent whole on disk
// while any block of it is still the file's. A tenant rewriting a 24 MiB
// file in its 32 MiB cache from one block further each time grew the
// pool by 283 MiB in 60 rewrites (by 216 MiB here in 40), without bound:
// the cache's size bounded its files, not its blocks on the pool. Now
// the image is written in place (chattr +C): the same rewrites grow the
// pool by the file's first write alone (24 MiB). The control: 4 of the
// rewrites in the sandbox's own volume (copied on write, bounded by its
// disk quota) grow it by 120 MiB.
func TestHostileCacheImageHoldsItsSizeOnThePoolAgainstRewrites(t *testing.T) {
	tb := install(t)
	regularMember(t, rootAgent)
	reconfigure(t, fmt.Sprintf("users = [%q]\n[limits]\ncache_quota = \"32MiB\"\n", rootAgent))
	// No sandbox of the agent's: the cache is made anew.
	okAs(t, rootAgent, "cache", "clear")
	t.Cleanup(func() { ctlAs(t, rootAgent, "cache", "clear") })
	id := agentSandbox(t)
	const file = 24

	// The control: in the sandbox's volume, 4 rewrites grow the pool.
	before := poolUsed(t, tb)
	if n := bytesOut(t, "the rewrites in the volume", agentShOK(t, id, true, rewrites(tb.Btrfs.Project+"/rw", file, 4))); n != file*mib {
		t.Fatalf("the control: the rewritten file holds %d bytes; want %d", n, file*mib)
	}
	grown := poolUsed(t, tb) - before
	t.Logf("the control: 4 rewrites of %d MiB in the sandbox's volume grew the pool by %.1f MiB", file, float64(grown)/mib)
	if grown < 2*file*mib {
		t.Fatalf("the control: 4 rewrites in the sandbox's volume grew the pool by %d bytes; want at least %d (copied on write)", grown, 2*file*mib)
	}
	agentShOK(t, id, true, "rm "+tb.Btrfs.Project+"/rw && sync")

	// In the cache: 40 rewrites, and the pool holds no more than the
	// image's size for it.
	before = poolUsed(t, tb)
	if n := bytesOut(t, "the rewrites in the cache", agentShOK(t, id, false, rewrites("/var/cache/sandbox/rw", file, 40))); n != file*mib {
		t.Fatalf("the rewritten file in the cache holds %d bytes; want %d", n, file*mib)
	}
	grown = poolUsed(t, tb) - before
	t.Logf("40 rewrites of %d MiB in a 32 MiB cache grew the pool by %.1f MiB", file, float64(grown)/mib)
	if grown > 32*mib+8*mib {
		t.Errorf("40 rewrites of a %d MiB file in a 32 MiB cache grew the pool by %d bytes; want at most the image's size", file, grown)
	}
}
