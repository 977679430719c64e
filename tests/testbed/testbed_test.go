package testbed_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	sdbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/tests/testbed"
)

func TestMain(m *testing.M) {
	if mb := os.Getenv("TESTBED_HOG_MB"); mb != "" {
		os.Exit(hog(mb))
	}
	testbed.Main(m)
}

// hog runs testbed.Hog with the size from the environment.
func hog(mb string) int {
	n, err := strconv.Atoi(mb)
	if err != nil {
		fmt.Fprintln(os.Stderr, "hog:", err)
		return 2
	}
	return testbed.Hog(n)
}

// systemBus connects to the testbed's system bus the way sandboxd will.
func systemBus(t *testing.T) *sdbus.Conn {
	t.Helper()
	conn, err := sdbus.NewSystemConnectionContext(context.Background())
	if err != nil {
		t.Fatalf("connecting to the system bus: %v", err)
	}
	t.Cleanup(conn.Close)
	return conn
}

// startScope puts pid into a new transient scope and waits for the job.
func startScope(t *testing.T, conn *sdbus.Conn, name string, pid int, props ...sdbus.Property) {
	t.Helper()
	ctx := context.Background()
	props = append([]sdbus.Property{
		sdbus.PropPids(uint32(pid)),
		sdbus.PropDescription("testbed test " + t.Name()),
	}, props...)
	done := make(chan string, 1)
	if _, err := conn.StartTransientUnitContext(ctx, name, "fail", props, done); err != nil {
		t.Fatalf("starting scope %s: %v", name, err)
	}
	t.Cleanup(func() {
		_, _ = conn.StopUnitContext(ctx, name, "replace", nil)
		_ = conn.ResetFailedUnitContext(ctx, name)
	})
	select {
	case result := <-done:
		if result != "done" {
			t.Fatalf("starting scope %s: job result %q", name, result)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("starting scope %s: no job result after 30s", name)
	}
}

func uint64Prop(name string, v uint64) sdbus.Property {
	return sdbus.Property{Name: name, Value: dbus.MakeVariant(v)}
}

// runHog runs the hog (200 MiB) in a scope with the given MemoryMax.
func runHog(t *testing.T, conn *sdbus.Conn, memoryMaxMiB uint64) (string, error) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), "TESTBED_HOG_MB=200")
	var stdout bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stdout
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	startScope(t, conn, fmt.Sprintf("testbed-hog-%d.scope", memoryMaxMiB), cmd.Process.Pid,
		uint64Prop("MemoryMax", memoryMaxMiB<<20))
	if _, err := io.WriteString(stdin, "go\n"); err != nil {
		t.Fatal(err)
	}
	stdin.Close()
	err = cmd.Wait()
	return stdout.String(), err
}

func TestScopeMemoryMaxKillsAProcessOverIt(t *testing.T) {
	testbed.Require(t)
	conn := systemBus(t)

	// The control: the same 200 MiB fits under 512 MiB.
	out, err := runHog(t, conn, 512)
	if err != nil || !strings.Contains(out, "allocated 200 MiB") {
		t.Fatalf("200 MiB under MemoryMax=512M: %v, output %q; want it to finish", err, out)
	}

	out, err = runHog(t, conn, 64)
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		t.Fatalf("200 MiB under MemoryMax=64M: %v, output %q; want it killed", err, out)
	}
	if ws := exit.Sys().(syscall.WaitStatus); !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("200 MiB under MemoryMax=64M ended with %v, output %q; want SIGKILL from the OOM killer", ws, out)
	}
	if strings.Contains(out, "allocated") {
		t.Fatalf("200 MiB under MemoryMax=64M printed %q: the limit did not hold", out)
	}
}

// forkLoop starts 30 long sleeps in the background, as fast as it can.
const forkLoop = `read go
i=0
while [ $i -lt 30 ]; do
	sleep 300 >/dev/null 2>&1 &
	i=$((i+1))
done
echo started $i`

// runForkLoop runs forkLoop in a scope with TasksMax and returns what it
// printed and the scope's task count after the loop ended.
func runForkLoop(t *testing.T, conn *sdbus.Conn, tasksMax uint64) (string, uint64, error) {
	name := fmt.Sprintf("testbed-forks-%d.scope", tasksMax)
	cmd := exec.Command("/bin/sh", "-c", forkLoop)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	startScope(t, conn, name, cmd.Process.Pid, uint64Prop("TasksMax", tasksMax))
	if _, err := io.WriteString(stdin, "go\n"); err != nil {
		t.Fatal(err)
	}
	stdin.Close()
	runErr := cmd.Wait()
	prop, err := conn.GetUnitTypePropertyContext(context.Background(), name, "Scope", "TasksCurrent")
	if err != nil {
		t.Fatalf("reading TasksCurrent of %s: %v", name, err)
	}
	tasks, ok := prop.Value.Value().(uint64)
	if !ok {
		t.Fatalf("TasksCurrent of %s is %v, not a number", name, prop.Value)
	}
	return out.String(), tasks, runErr
}

func TestScopeTasksMaxStopsAForkLoop(t *testing.T) {
	testbed.Require(t)
	conn := systemBus(t)

	out, tasks, err := runForkLoop(t, conn, 100)
	if err != nil || !strings.Contains(out, "started 30") || tasks != 30 {
		t.Fatalf("30 forks under TasksMax=100: %v, output %q, %d tasks left; want all 30 running", err, out, tasks)
	}

	out, tasks, err = runForkLoop(t, conn, 5)
	if err == nil || strings.Contains(out, "started") {
		t.Fatalf("30 forks under TasksMax=5: %v, output %q; want the loop to fail to fork", err, out)
	}
	if !strings.Contains(strings.ToLower(out), "fork") {
		t.Errorf("30 forks under TasksMax=5 said %q; want a fork failure", out)
	}
	if tasks == 0 || tasks > 5 {
		t.Fatalf("30 forks under TasksMax=5 left %d tasks; want between 1 and 5", tasks)
	}
}

// writeProject fills dir with a small tree of every common kind of entry.
func writeProject(t *testing.T, dir string) {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(dir, "src", "deep", "er"), 0o755))
	must(os.MkdirAll(filepath.Join(dir, "empty"), 0o700))
	must(os.WriteFile(filepath.Join(dir, "README"), []byte("a project\n"), 0o644))
	must(os.WriteFile(filepath.Join(dir, "src", "run.sh"), []byte("#!/bin/sh\necho hi\n"), 0o755))
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	must(os.WriteFile(filepath.Join(dir, "src", "deep", "er", "data.bin"), big, 0o600))
	must(os.Symlink("src/run.sh", filepath.Join(dir, "run")))
	must(os.Link(filepath.Join(dir, "README"), filepath.Join(dir, "README.hardlink")))
}

// treeOf describes every entry below root: kind, permissions, size, content
// digest and link target, keyed by relative path.
func treeOf(t *testing.T, root string) map[string]string {
	t.Helper()
	tree := map[string]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		info, err := d.Info()
		if err != nil {
			return err
		}
		desc := fmt.Sprintf("%v", info.Mode())
		switch {
		case info.Mode().IsRegular():
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			desc += fmt.Sprintf(" %d %x", len(data), sha256.Sum256(data))
		case info.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(path)
			if err != nil {
				return err
			}
			desc += " -> " + target
		}
		if rel != "." {
			tree[rel] = desc
		}
		return nil
	})
	if err != nil {
		t.Fatalf("reading tree %s: %v", root, err)
	}
	return tree
}

func sameTree(t *testing.T, want, got map[string]string, what string) {
	t.Helper()
	for path, w := range want {
		if g, ok := got[path]; !ok {
			t.Errorf("%s: %s is missing", what, path)
		} else if g != w {
			t.Errorf("%s: %s is %s; want %s", what, path, g, w)
		}
	}
	for path := range got {
		if _, ok := want[path]; !ok {
			t.Errorf("%s: %s should not be there", what, path)
		}
	}
}

func fsType(t *testing.T, path string) int64 {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Type)
}

const (
	btrfsMagic   = 0x9123683e
	fuseMagic    = 0x65735546
	ext4Magic    = 0xef53
	overlayMagic = 0x794c7630
)

func TestBtrfsSnapshotShowsTheProjectsFiles(t *testing.T) {
	tb := testbed.Require(t)
	if got := fsType(t, tb.Btrfs.Project); got != btrfsMagic {
		t.Fatalf("%s is on filesystem type %#x; want btrfs", tb.Btrfs.Project, got)
	}
	writeProject(t, tb.Btrfs.Project)
	snap := filepath.Join(tb.Btrfs.Mount, "snap1")
	testbed.MustRun(t, "btrfs", "subvolume", "snapshot", tb.Btrfs.Project, snap)
	t.Cleanup(func() { testbed.MustRun(t, "btrfs", "subvolume", "delete", snap) })

	want := treeOf(t, tb.Btrfs.Project)
	sameTree(t, want, treeOf(t, snap), "btrfs snapshot")
	if len(want) < 8 {
		t.Fatalf("project tree has %d entries; the fixture did not land", len(want))
	}

	// Copy-on-write: a change in the snapshot leaves the project as it was.
	if err := os.WriteFile(filepath.Join(snap, "README"), []byte("changed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if data, _ := os.ReadFile(filepath.Join(tb.Btrfs.Project, "README")); string(data) != "a project\n" {
		t.Fatalf("project README is %q after writing the snapshot's", data)
	}
	parent := testbed.MustRun(t, "btrfs", "subvolume", "show", snap)
	uuid := testbed.MustRun(t, "btrfs", "subvolume", "show", tb.Btrfs.Project)
	if !strings.Contains(parent, "Parent UUID:") || !strings.Contains(uuid, strings.TrimSpace(field(parent, "Parent UUID:"))) {
		t.Fatalf("snapshot's parent is not the project:\n%s\n%s", parent, uuid)
	}
}

func TestZFSCloneShowsTheProjectsFiles(t *testing.T) {
	tb := testbed.Require(t)
	if got := fsType(t, tb.ZFS.Mountpoint); got != fuseMagic {
		t.Fatalf("%s is on filesystem type %#x; want zfs-fuse", tb.ZFS.Mountpoint, got)
	}
	writeProject(t, tb.ZFS.Mountpoint)
	snap := tb.ZFS.Project + "@s1"
	clone := tb.ZFS.Pool + "/clone1"
	testbed.MustRun(t, "zfs", "snapshot", snap)
	testbed.MustRun(t, "zfs", "clone", snap, clone)
	t.Cleanup(func() {
		// zfs-fuse refuses to destroy a mounted clone, and for a moment
		// after the unmount still calls it busy.
		testbed.MustRun(t, "zfs", "unmount", clone)
		for i := 0; ; i++ {
			out, err := exec.Command("zfs", "destroy", clone).CombinedOutput()
			if err == nil {
				break
			}
			if i == 50 || !strings.Contains(string(out), "busy") {
				t.Fatalf("zfs destroy %s: %v: %s", clone, err, out)
			}
			time.Sleep(100 * time.Millisecond)
		}
		testbed.MustRun(t, "zfs", "destroy", snap)
	})
	mountpoint := strings.TrimSpace(testbed.MustRun(t, "zfs", "get", "-H", "-o", "value", "mountpoint", clone))
	if origin := strings.TrimSpace(testbed.MustRun(t, "zfs", "get", "-H", "-o", "value", "origin", clone)); origin != snap {
		t.Fatalf("clone's origin is %q; want %q", origin, snap)
	}

	want := treeOf(t, tb.ZFS.Mountpoint)
	sameTree(t, want, treeOf(t, mountpoint), "zfs clone")
	if len(want) < 8 {
		t.Fatalf("project tree has %d entries; the fixture did not land", len(want))
	}

	if err := os.WriteFile(filepath.Join(mountpoint, "README"), []byte("changed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if data, _ := os.ReadFile(filepath.Join(tb.ZFS.Mountpoint, "README")); string(data) != "a project\n" {
		t.Fatalf("project README is %q after writing the clone's", data)
	}
}

// field returns the rest of the line of out that starts (after blanks) with key.
func field(out, key string) string {
	for _, line := range strings.Split(out, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), key); ok {
			return rest
		}
	}
	return ""
}

func TestRootLayersAreReadOnlyIdmappableMounts(t *testing.T) {
	tb := testbed.Require(t)
	want := []string{testbed.LayersDir + "/upper", testbed.LayersDir + "/lower"}
	if !slices.Equal(tb.Layers, want) {
		t.Fatalf("Info.Layers is %q; want %q", tb.Layers, want)
	}
	upper, lower := tb.Layers[0], tb.Layers[1]
	if got := fsType(t, "/"); got != overlayMagic {
		t.Fatalf("the testbed's / is on filesystem type %#x; want overlayfs", got)
	}
	if got := fsType(t, upper); got != ext4Magic {
		t.Errorf("%s is on filesystem type %#x; want ext4 (its own filesystem, not btrfs)", upper, got)
	}
	if got := fsType(t, lower); got == overlayMagic {
		t.Errorf("%s is an overlay; want the machine's root filesystem", lower)
	}
	for _, layer := range tb.Layers {
		probe := filepath.Join(layer, "testbed-write-probe")
		f, err := os.OpenFile(probe, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err == nil {
			f.Close()
			os.Remove(probe)
		}
		if !errors.Is(err, syscall.EROFS) {
			t.Errorf("creating %s: %v; want EROFS", probe, err)
		}
	}

	// What is written in the testbed's root after boot is in the upper
	// layer, and not in the machine's.
	const name = "etc/testbed-layers-test"
	content := []byte(fmt.Sprintf("written by pid %d\n", os.Getpid()))
	if err := os.WriteFile("/"+name, content, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove("/" + name) })
	if got, err := os.ReadFile(filepath.Join(upper, name)); err != nil || !bytes.Equal(got, content) {
		t.Errorf("%s in the upper layer: %q, %v; want %q", name, got, err, content)
	}
	if _, err := os.Lstat(filepath.Join(lower, name)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%s in the lower layer: %v; want it absent", name, err)
	}

	// Each layer can be idmapped (root shows as the userns's root, host
	// uid 100000); the overlay itself cannot.
	userns := userNamespace(t, 100000)
	for _, layer := range tb.Layers {
		clone, err := idmappedClone(layer, userns)
		if err != nil {
			t.Errorf("idmapping %s: %v", layer, err)
			continue
		}
		var st unix.Stat_t
		if err := unix.Fstatat(clone, "etc", &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			t.Errorf("stat of etc in the idmapped %s: %v", layer, err)
		} else if st.Uid != 100000 || st.Gid != 100000 {
			t.Errorf("etc in the idmapped %s is owned by %d:%d; want 100000:100000", layer, st.Uid, st.Gid)
		}
		unix.Close(clone)
	}
	if clone, err := idmappedClone("/", userns); err == nil {
		unix.Close(clone)
		t.Errorf("idmapping the testbed's / (overlayfs) succeeded; want EINVAL")
	} else if !errors.Is(err, unix.EINVAL) {
		t.Errorf("idmapping the testbed's /: %v; want EINVAL", err)
	}
}

// userNamespace returns an fd of a new user namespace that maps its uids
// and gids 0-65535 to host ones from base; a sleeping child holds it
// until the fd is open.
func userNamespace(t *testing.T, base int) int {
	t.Helper()
	cmd := exec.Command("sleep", "60")
	ids := []syscall.SysProcIDMap{{ContainerID: 0, HostID: base, Size: 65536}}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER,
		UidMappings: ids,
		GidMappings: ids,
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting a process in a new user namespace: %v", err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	fd, err := unix.Open(fmt.Sprintf("/proc/%d/ns/user", cmd.Process.Pid), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("opening the user namespace of pid %d: %v", cmd.Process.Pid, err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

// idmappedClone clones the mount at path (alone, detached) and idmaps it
// through userns, as a sandbox does with each layer of its root.
func idmappedClone(path string, userns int) (int, error) {
	fd, err := unix.OpenTree(unix.AT_FDCWD, path, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("cloning the mount of %s: %w", path, err)
	}
	attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP, Userns_fd: uint64(userns)}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, attr); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("idmapping the clone of %s: %w", path, err)
	}
	return fd, nil
}
