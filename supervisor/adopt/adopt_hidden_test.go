package adopt

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/supervisor"
	"github.com/sandboxd/sandboxd/tests/testbed"
)

// A test binary started with testbed.HiddenHolderEnv becomes a holder
// that /proc/PID shows nothing of (hideHolder), before any test or
// TestMain runs.
func init() {
	if mode, tree, ready, ok := testbed.HiddenHolderAsked(); ok {
		hideHolder(mode, tree, ready)
	}
}

func hideHolder(mode, tree, ready string) {
	if mode != "many-fds" {
		testbed.HideHolder(mode, tree, "f", ready)
	}
	fail := func(err error) { fmt.Fprintln(os.Stderr, "hidden holder:", err); os.Exit(2) }
	// Not a holder: tree is a file elsewhere, held manyFDs times.
	f, err := os.Open(tree)
	if err != nil {
		fail(err)
	}
	for range manyFDs {
		if _, err := unix.Dup(int(f.Fd())); err != nil {
			fail(err)
		}
	}
	if err := os.WriteFile(ready, nil, 0o644); err != nil {
		fail(err)
	}
	for {
		time.Sleep(time.Hour)
	}
}

// manyFDs is how many descriptors a "many-fds" process holds.
const manyFDs = 15000

// startHiddenHolder runs this binary as a hidden holder of tree (mode as
// hideHolder's) and returns its pid once it holds it; killed at the
// test's end.
func startHiddenHolder(t *testing.T, mode, tree string) int {
	t.Helper()
	ready := filepath.Join(t.TempDir(), "ready")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), testbed.HiddenHolderEnv(mode, tree, ready))
	cmd.Dir = "/"
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	pid := cmd.Process.Pid
	// Ready once it says so and, for an exited leader, once the leader's
	// links are gone.
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(ready); err != nil {
			continue
		}
		if _, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid)); mode == "exited-leader" && err == nil {
			continue
		}
		return pid
	}
	t.Fatalf("the hidden holder (%s) of %s was not ready within 30 s", mode, tree)
	return 0
}

// threadsIn is the threads of pid whose working directory is dir.
func threadsIn(pid int, dir string) []int {
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	var out []int
	for _, task := range tasks {
		if cwd, _ := os.Readlink(fmt.Sprintf("/proc/%d/task/%s/cwd", pid, task.Name())); cwd == dir {
			tid, _ := strconv.Atoi(task.Name())
			out = append(out, tid)
		}
	}
	return out
}

// A process that works in the tree through a thread /proc/PID does not
// show (its main thread exited, or a thread with a working directory of
// its own) holds it.
func TestHoldersHiddenInThreads(t *testing.T) {
	base := t.TempDir()
	tree := filepath.Join(base, "tree")
	treeWithFile(t, tree)
	for _, mode := range []string{"exited-leader", "thread-cwd"} {
		t.Run(mode, func(t *testing.T) {
			pid := startHiddenHolder(t, mode, tree)
			// The attack: /proc/PID/cwd is not the tree, one of its
			// threads works there.
			cwd, _ := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid))
			if cwd == tree || len(threadsIn(pid, tree)) == 0 {
				t.Fatalf("pid %d: /proc/PID/cwd %q, threads working in %s: %v; not the attack", pid, cwd, tree, threadsIn(pid, tree))
			}
			if !heldBy(t, tree, pid) {
				t.Errorf("pid %d (%s) works in %s through thread(s) %v, yet is not taken for a holder", pid, mode, tree, threadsIn(pid, tree))
			}
		})
	}
}

// The walk is bounded (maxWalk): a process holding more descriptors than
// it looks through makes it fail, saying so, rather than keep services
// stopped or frozen, or a release waiting, for as long as a user chose.
func TestHoldersWalkIsBounded(t *testing.T) {
	base := t.TempDir()
	tree := filepath.Join(base, "tree")
	treeWithFile(t, tree)
	treeWithFile(t, tree+"-other")
	defer func(m int) { maxWalk = m }(maxWalk)
	maxWalk = manyFDs / 2
	// The control: the machine's own threads, descriptors and mounts are
	// within the bound, which alone refuses below.
	if _, err := holders(tree); err != nil {
		t.Fatalf("a walk bounded at %d on this machine: %v; the check below would prove nothing", maxWalk, err)
	}
	startHiddenHolder(t, "many-fds", tree+"-other/f")
	start := time.Now()
	held, err := holders(tree)
	t.Logf("a walk with a process of %d descriptors, bounded at %d: %v, %v in %v", manyFDs, maxWalk, held, err, time.Since(start))
	if err == nil || !errors.Is(err, supervisor.ErrProjectInUse) || !strings.Contains(err.Error(), "more than sandboxd looks through") {
		t.Errorf("a walk past its bound (%d) gave %v, %v; want it refused, saying so", maxWalk, held, err)
	}
}

// A file of the tree mapped, no descriptor kept, and a filesystem then
// mounted over the tree's path in the process's own mount namespace: the
// path in its maps leads, in its view, to that filesystem, yet what it
// maps is the tree's file. The mapping's own link (map_files) says so.
func TestHoldersMappingUnderAMountPutOverIt(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root: mounts in a mount namespace of its own")
	}
	for _, prog := range []string{"unshare", "python3"} {
		if _, err := exec.LookPath(prog); err != nil {
			t.Skipf("no %s", prog)
		}
	}
	// The tree on a filesystem of its own: maps name a file's device as
	// its inode has it, which for an overlay's (the testbed's root) is
	// not the overlay's.
	base := t.TempDir()
	if err := unix.Mount("adopt-test", base, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(base, unix.MNT_DETACH) })
	tree := filepath.Join(base, "tree")
	treeWithFile(t, tree)
	script := `mount --make-rprivate / && exec python3 -c '
import ctypes, os, subprocess, sys, time
tree, ready = sys.argv[1], sys.argv[2]
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
fd = os.open(tree + "/f", os.O_RDONLY)
if libc.mmap(None, 4096, 1, 1, fd, 0) in (None, ctypes.c_void_p(-1).value):
    sys.exit("mmap: errno %d" % ctypes.get_errno())
os.close(fd)  # (mmap.mmap would keep a descriptor of its own)
subprocess.run(["mount", "-t", "tmpfs", "cover", tree], check=True)
open(ready, "w").close()
time.sleep(300)' "$1" "$2"`
	pid := start(t, tree, filepath.Join(base, "ready-covered"), script, "unshare", "-m")
	maps, _ := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if !strings.Contains(string(maps), tree+"/f") {
		t.Fatalf("pid %d maps no %s/f: not the attack:\n%s", pid, tree, maps)
	}
	if !heldBy(t, tree, pid) {
		t.Errorf("pid %d maps %s/f, its path since covered by a mount of its own, yet is not taken for a holder", pid, tree)
	}
}
