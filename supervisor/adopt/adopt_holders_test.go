package adopt

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"
)

// start runs script with sh (its $1 the tree, $2 a file it must create
// once it holds what it holds, then wait), under wrapper's words if any,
// waits for the file and returns the pid; killed at the test's end.
func start(t *testing.T, tree, ready, script string, wrapper ...string) int {
	t.Helper()
	argv := append(wrapper, "sh", "-c", script, "sh", tree, ready)
	cmd := exec.Command(argv[0], argv[1:]...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(ready); err == nil {
			return cmd.Process.Pid
		}
	}
	t.Fatalf("%q did not say it held what it holds within 30 s", script)
	return 0
}

func heldBy(t *testing.T, dir string, pid int) bool {
	t.Helper()
	held, err := holders(dir)
	if err != nil {
		t.Fatal(err)
	}
	return slices.ContainsFunc(held, func(h holder) bool { return h.pid == pid })
}

// treeWithFile makes dir holding file f.
func treeWithFile(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("data\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// A process holds a tree by its working directory, a file open, or a
// file mapped; not by a file elsewhere on the same filesystem.
func TestHoldersByWhatTheFileIs(t *testing.T) {
	base := t.TempDir()
	tree := filepath.Join(base, "tree")
	treeWithFile(t, tree)
	treeWithFile(t, tree+"-other")
	for _, c := range []struct {
		name, script string
		holds        bool
	}{
		{"cwd", `cd "$1" && touch "$2" && exec sleep 300`, true},
		{"fd", `exec 3<"$1/f"; touch "$2"; exec sleep 300`, true},
		{"map", `exec python3 -c 'import mmap,sys,time; f=open(sys.argv[1]+"/f","rb"); m=mmap.mmap(f.fileno(),0,prot=mmap.PROT_READ); f.close(); open(sys.argv[2],"w").close(); time.sleep(300)' "$1" "$2"`, true},
		{"elsewhere", `cd "$1-other" && exec 3<"$1-other/f"; touch "$2"; exec sleep 300`, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := exec.LookPath("python3"); err != nil && c.name == "map" {
				t.Skip("no python3 to map a file")
			}
			pid := start(t, tree, filepath.Join(base, "ready-"+c.name), c.script)
			if got := heldBy(t, tree, pid); got != c.holds {
				t.Errorf("pid %d (%s) holds %s: %v, want %v", pid, c.name, tree, got, c.holds)
			}
		})
	}
}

// A process of another mount namespace whose working directory and open
// file are an overlay's view of the tree, at the tree's own path, holds
// nothing of the tree (issue 28's finding 2: a sandbox's process vetoed
// the adoption of any directory it could see); one of that namespace
// whose working directory is the tree itself, bound there, does.
func TestHoldersOfAnotherMountNamespace(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root: mounts an overlay in a mount namespace of its own")
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("no unshare")
	}
	base := t.TempDir()
	tree := filepath.Join(base, "tree")
	treeWithFile(t, tree)
	layers := t.TempDir() // (an upper layer may not be in the lower)
	for _, d := range []string{layers + "/upper", layers + "/work", base + "/bound"} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// The overlay over the tree's parent, in the namespace: its tree
	// shows the same files at the same path, as a sandbox's root does.
	overlay := `mount --make-rprivate / && mount -t overlay overlay -o "lowerdir=${1%/tree},upperdir=` + layers + `/upper,workdir=` + layers + `/work" "${1%/tree}" && cd "$1" && exec 3<"$1/f"; touch "$2"; exec sleep 300`
	pid := start(t, tree, filepath.Join(layers, "ready-overlay"), overlay, "unshare", "-m")
	if link, _ := os.Readlink(filepath.Join("/proc", strconv.Itoa(pid), "cwd")); link != tree {
		t.Fatalf("the overlay's process works in %q, not at the tree's path %s: the check below would prove nothing", link, tree)
	}
	if heldBy(t, tree, pid) {
		t.Errorf("a process whose working directory is an overlay's view of %s (same path, another filesystem) is taken for a holder", tree)
	}
	bound := `mount --make-rprivate / && mount --bind "$1" "${1%/tree}/bound" && cd "${1%/tree}/bound" && touch "$2" && exec sleep 300`
	pid = start(t, tree, filepath.Join(base, "ready-bound"), bound, "unshare", "-m")
	if !heldBy(t, tree, pid) {
		t.Errorf("a process working in %s bound elsewhere in its own mount namespace is not taken for a holder", tree)
	}
}
