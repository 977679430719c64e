// Package testbed gives tests real parts on a plain build machine: a private
// systemd with a system D-Bus (PID 1 of its own PID and mount namespace, its
// root an overlay of the machine's own /), a btrfs filesystem on a loop image
// and a zfs-fuse pool on an image file, both living inside that namespace.
//
// Nothing done inside reaches the machine: writes to /etc, /usr or /var land
// in a throw-away upper layer (an ext4 loop image; both layers are also
// shown read-only under LayersDir), /run and /tmp are private tmpfs, and every
// mount, loop device and process lives and dies with the namespace. Only the
// directories named as binds (the repository, the test binary's directory,
// the image directory) are the machine's own, seen at the same path inside.
//
// Tests use it through Main and Require:
//
//	func TestMain(m *testing.M) { testbed.Main(m) }
//
//	func TestSomething(t *testing.T) {
//		tb := testbed.Require(t)
//		... tb.Btrfs.Project is a real btrfs subvolume, the system bus is real ...
//	}
//
// ../shared/TESTBED.md explains why each step is the way it is.
package testbed

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// DefaultDir holds the testbed's files. It is on disk (not /tmp) because the
// overlay's upper layer and the pool images live there.
const DefaultDir = "/var/tmp/sandboxd-testbed"

// lockPath is one lock for the whole machine, whatever the directory: two
// testbed systemds at once would share the hybrid cgroup tree.
const lockPath = DefaultDir + "/lock"

// Where the testbed mounts its filesystems, inside its namespace.
const (
	BtrfsMount  = "/mnt/testbed-btrfs"
	ZFSPool     = "tbpool"
	ZFSMount    = "/mnt/testbed-zfs"
	projectName = "project"
	envInfo     = "SANDBOXD_TESTBED" // path of the Info file, set for processes inside
	// EnvDir, when set, names the testbed's directory instead of DefaultDir.
	EnvDir         = "TESTBED_DIR"
	stateFile      = "testbed.json"
	systemdBinary  = "/lib/systemd/systemd"
	bootLogName    = "boot.log"
	zfsFuseUnit    = "testbed-zfs-fuse.service"
	defaultBtrfsMB = 2048
	defaultZFSMB   = 512
	// rootImageName holds the upper layer of the testbed's root (ext4), in
	// the shared directory; rootLayerMB sizes it (a sparse file).
	rootImageName = "root.img"
	rootLayerMB   = 8 << 10
)

// LayersDir is where, inside the testbed, the layers of its overlay root
// are bound read-only: "upper" (what was written in the testbed) and
// "lower" (the machine's root filesystem, without its submounts).
const LayersDir = "/run/testbed/layers"

// ErrBusy means another testbed is up on this machine (only one may run at a
// time: two systemd instances would share the hybrid cgroup tree).
var ErrBusy = errors.New("another testbed is running")

// ErrNotUp means no testbed is running.
var ErrNotUp = errors.New("no testbed is running")

// Info describes a running testbed. It is written as JSON into the testbed's
// shared directory, which processes inside see at the same path.
type Info struct {
	PID       int      `json:"pid"`        // the testbed's systemd, as the host sees it
	StartTime uint64   `json:"start_time"` // of PID, in clock ticks since boot: guards against pid reuse
	Dir       string   `json:"dir"`        // the instance directory on the host
	Binds     []string `json:"binds"`      // host directories seen at the same path inside
	Btrfs     Btrfs    `json:"btrfs"`
	ZFS       ZFS      `json:"zfs"`
	// Layers are the layers of the testbed's root, top first, as read-only
	// mounts inside it (see LayersDir): the value of a sandboxd config's
	// `[sandbox] root_layers`. The root itself is an overlay, which cannot
	// be idmapped; each layer can.
	Layers []string `json:"layers"`
	// Cgroup is a host's (UpHosts'): its subtree, the same path below the
	// root of every cgroup hierarchy, its systemd's cgroup namespace's root.
	Cgroup string `json:"cgroup,omitempty"`
}

// Btrfs is the testbed's btrfs filesystem.
type Btrfs struct {
	Image   string `json:"image"`   // the loop image, on the host's disk
	Mount   string `json:"mount"`   // where it is mounted inside the testbed
	Project string `json:"project"` // a subvolume made at start, empty
}

// ZFS is the testbed's zfs-fuse pool.
type ZFS struct {
	Image      string `json:"image"`      // the pool's file vdev, on the host's disk
	Pool       string `json:"pool"`       // pool name
	Project    string `json:"project"`    // a dataset made at start, empty
	Mountpoint string `json:"mountpoint"` // where Project is mounted inside the testbed
}

// Config says how to bring a testbed up.
type Config struct {
	// Dir is the base directory; DefaultDir when empty.
	Dir string
	// Binds are host directories to show inside at the same path.
	Binds []string
	// BtrfsMB and ZFSMB size the images (sparse files); defaults when zero.
	BtrfsMB, ZFSMB int64
	// DieWithParent kills the testbed when the process that started it dies,
	// even by SIGKILL, so a test binary cannot leave one behind.
	DieWithParent bool
	// Logf, when set, receives progress lines.
	Logf func(format string, args ...any)
}

func (c *Config) dir() string { return baseDir(c.Dir) }

// baseDir is dir, or DefaultDir when dir is empty.
func baseDir(dir string) string {
	if dir == "" {
		return DefaultDir
	}
	return dir
}

func (c *Config) logf(format string, args ...any) {
	if c.Logf != nil {
		c.Logf(format, args...)
	}
}

// instanceDir is the directory of the (single) testbed under base.
func instanceDir(base string) string { return filepath.Join(base, "tb") }

// InfoPath is where the Info of the testbed under base is kept.
func InfoPath(base string) string { return filepath.Join(instanceDir(base), "shared", stateFile) }

// Preflight checks what the testbed needs from the machine and says, for each
// missing piece, what to install or why it cannot run.
func Preflight() error {
	var problems []string
	if os.Geteuid() != 0 {
		problems = append(problems, "not running as root: the testbed mounts filesystems and creates namespaces (run `sudo make test`)")
	}
	tools := []struct{ name, pkg string }{
		{systemdBinary, "systemd"},
		{"dbus-daemon", "dbus"},
		{"nsenter", "util-linux"},
		{"losetup", "mount"},
		{"pivot_root", "util-linux"},
		{"mkfs.btrfs", "btrfs-progs"},
		{"mkfs.ext4", "e2fsprogs"},
		{"btrfs", "btrfs-progs"},
		{"zfs-fuse", "zfs-fuse"},
		{"zpool", "zfs-fuse"},
		{"zfs", "zfs-fuse"},
	}
	for _, tool := range tools {
		if _, err := exec.LookPath(tool.name); err != nil {
			problems = append(problems, fmt.Sprintf("%s not found: apt-get install %s (or run tests/install-deps.sh)", tool.name, tool.pkg))
		}
	}
	for _, fs := range []string{"overlay", "btrfs", "ext4", "fuse"} {
		if !kernelHasFS(fs) {
			problems = append(problems, fmt.Sprintf("the kernel has no %s filesystem (not in /proc/filesystems, and `modprobe %s` did not add it)", fs, fs))
		}
	}
	for _, dev := range []string{"/dev/fuse", "/dev/loop-control"} {
		if _, err := os.Stat(dev); err != nil {
			problems = append(problems, fmt.Sprintf("%s is missing: the testbed needs FUSE and loop devices", dev))
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("the testbed cannot run on this machine:\n  - %s", strings.Join(problems, "\n  - "))
	}
	return nil
}

func kernelHasFS(name string) bool {
	has := func() bool {
		data, err := os.ReadFile("/proc/filesystems")
		if err != nil {
			return false
		}
		for _, line := range strings.Split(string(data), "\n") {
			fields := strings.Fields(line)
			if len(fields) > 0 && fields[len(fields)-1] == name {
				return true
			}
		}
		return false
	}
	if has() {
		return true
	}
	// A module that is not loaded yet is fine: try once.
	_ = exec.Command("modprobe", name).Run()
	return has()
}

// procStartTime reads a live process's start time (field 22 of
// /proc/PID/stat). A zombie counts as gone: a testbed whose systemd was
// killed may wait for a parent that never reaps it.
func procStartTime(pid int) (uint64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces; fields after it follow ')'.
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("reading /proc/%d/stat: unexpected format", pid)
	}
	fields := strings.Fields(s[i+1:])
	if len(fields) < 20 {
		return 0, fmt.Errorf("reading /proc/%d/stat: too few fields", pid)
	}
	if fields[0] == "Z" || fields[0] == "X" {
		return 0, fmt.Errorf("process %d has exited", pid)
	}
	return strconv.ParseUint(fields[19], 10, 64)
}

// alive says whether the testbed's systemd described by info still runs.
func (info *Info) alive() bool {
	st, err := procStartTime(info.PID)
	return err == nil && st == info.StartTime
}

// readInfo reads the Info file at path.
func readInfo(path string) (*Info, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var info Info
	if err := json.Unmarshal(data, &info); err != nil {
		return nil, fmt.Errorf("reading testbed state %s: %w", path, err)
	}
	return &info, nil
}

// Command returns a command that runs argv inside the testbed, in its PID
// and mount namespaces, starting in dir ("/" when empty).
func (tb *Testbed) Command(ctx context.Context, dir string, argv ...string) *exec.Cmd {
	if dir == "" {
		dir = "/"
	}
	args := append([]string{"-t", strconv.Itoa(tb.PID), "-p", "-m", "-n", "--wd=" + dir, "--"}, argv...)
	cmd := exec.CommandContext(ctx, "nsenter", args...)
	cmd.Env = append(os.Environ(), envInfo+"="+filepath.Join(tb.Dir, "shared", stateFile))
	return cmd
}

// Run runs argv inside the testbed and returns its standard output. A
// failure names the command and carries what it printed on standard error.
func (tb *Testbed) Run(ctx context.Context, argv ...string) (string, error) {
	cmd := tb.Command(ctx, "/", argv...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("running %q in the testbed: %w: %s", strings.Join(argv, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// tail returns the last lines of a file, for error messages.
func tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

// waitFor polls cond every interval until it returns true, ctx ends or
// timeout passes; the error says what was awaited and the last failure.
func waitFor(ctx context.Context, what string, timeout time.Duration, cond func() (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		ok, err := cond()
		if ok {
			return nil
		}
		last = err
		select {
		case <-ctx.Done():
			if last != nil {
				return fmt.Errorf("waiting for %s: %w (last: %v)", what, ctx.Err(), last)
			}
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// killAndWait sends SIGKILL to pid and waits until /proc shows it gone.
func killAndWait(pid int, startTime uint64) error {
	if st, err := procStartTime(pid); err != nil || st != startTime {
		return nil // already gone (or the pid was reused by someone else: not ours)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("killing the testbed's systemd (pid %d): %w", pid, err)
	}
	return waitFor(context.Background(), fmt.Sprintf("pid %d to exit", pid), 15*time.Second, func() (bool, error) {
		st, err := procStartTime(pid)
		return err != nil || st != startTime, nil
	})
}
