// Package cgroup is a command's cgroup, both ends: the daemon makes it
// (and a booted sandbox's cgroups), the init forks the command in it and
// ends all of it with the command.
//
// A command runs in a cgroup of its own, a child of its sandbox's (in the
// cgroup v2 hierarchy, which systemd keeps on every layout, with or
// without controllers): whatever it starts stays there, also what left
// its session with setsid and was orphaned to the init, so that when the
// command ends all of it can be ended, and nothing it started keeps the
// caller's streams or terminal. Process groups and sessions cannot do
// that: a process leaves them at will.
package cgroup

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Command is a command's cgroup, made by the daemon, which hands
// the init descriptors of it: the directory (to read its processes and
// events) and, opened by the daemon for writing, its cgroup.procs and
// cgroup.kill and the init's own cgroup.procs. The kernel checks a
// migration against the credentials the file was opened with: an init
// that is root of a user namespace only, with no right to the host's
// cgroup files, moves itself and kills through the daemon's.
type Command struct {
	Dir, Procs, Kill, ParentProcs *os.File
	path                          string
}

// Files are the descriptors the init gets, in the order it takes them.
func (c *Command) Files() []*os.File {
	return []*os.File{c.Dir, c.Procs, c.Kill, c.ParentProcs}
}

// cgroup2Roots are where cgroup v2 is mounted: at the root on a unified
// layout, under unified/ on a hybrid one.
var cgroup2Roots = []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"}

// NewCommand makes cgroup name beside the processes of init pid
// (a child of its cgroup v2 cgroup, its sandbox's scope).
func NewCommand(pid int, name string) (*Command, error) {
	parent, err := initCgroupDir(pid)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(parent, cgroupPrefix+name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, fmt.Errorf("making the command's cgroup: %w", err)
	}
	cg := &Command{path: dir}
	if cg.Dir, err = os.OpenFile(dir, os.O_RDONLY|unix.O_DIRECTORY, 0); err == nil {
		cg.Procs, err = os.OpenFile(dir+"/cgroup.procs", os.O_WRONLY, 0)
	}
	if err == nil {
		cg.Kill, err = os.OpenFile(dir+"/cgroup.kill", os.O_WRONLY, 0)
	}
	if err == nil {
		cg.ParentProcs, err = os.OpenFile(parent+"/cgroup.procs", os.O_WRONLY, 0)
	}
	if err != nil {
		cg.Remove()
		return nil, fmt.Errorf("opening the command's cgroup: %w", err)
	}
	return cg, nil
}

// initCgroupDir is the cgroup v2 directory of init pid: its sandbox's
// scope, or the scope's supervisor/ in a booted sandbox.
func initCgroupDir(pid int) (string, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return "", fmt.Errorf("reading the cgroup of the sandbox's init: %w", err)
	}
	var rel string
	for line := range strings.Lines(string(data)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "0::"); ok {
			rel = filepath.Clean("/" + v)
		}
	}
	if rel == "" || rel == "/" {
		return "", fmt.Errorf("the sandbox's init is in no cgroup v2 of its own: %w", errors.ErrUnsupported)
	}
	if strings.HasPrefix(filepath.Base(rel), cgroupPrefix) {
		rel = filepath.Dir(rel) // left in a command's (see Received.Enter): its sandbox's is the parent
	}
	for _, root := range cgroup2Roots {
		var fs unix.Statfs_t
		if unix.Statfs(root, &fs) == nil && fs.Type == unix.CGROUP2_SUPER_MAGIC {
			return filepath.Join(root, rel), nil
		}
	}
	return "", fmt.Errorf("no cgroup v2 hierarchy mounted: %w", errors.ErrUnsupported)
}

// Cgroups of a booted sandbox, under its scope: the init (and its
// commands) in one, its systemd's delegated subtree in the other, at most
// maxPayloadDepth deep and maxPayloadCgroups in all (systemd makes a
// slice or two and one per unit).
const (
	supervisorCgroup  = "supervisor"
	payloadCgroup     = "payload"
	maxPayloadDepth   = 16
	maxPayloadCgroups = 2048
)

// Boot makes a booted sandbox's cgroups under the scope of init
// pid, moves the init into supervisorCgroup, gives payloadCgroup to
// uid and gid (the sandbox's root on the host), as systemd's Delegate=
// gives a service's user its subtree, and returns the payload's
// cgroup.procs opened for writing: the boot stage moves itself through
// it (the kernel checks a migration against the opener's credentials).
func Boot(pid int, uid, gid uint32) (*os.File, error) {
	scope, err := initCgroupDir(pid)
	if err != nil {
		return nil, err
	}
	sup, payload := filepath.Join(scope, supervisorCgroup), filepath.Join(scope, payloadCgroup)
	for _, d := range []string{sup, payload} {
		if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return nil, fmt.Errorf("making the booted sandbox's cgroup %s: %w", d, err)
		}
	}
	if err := os.WriteFile(sup+"/cgroup.procs", []byte(strconv.Itoa(pid)), 0); err != nil {
		return nil, fmt.Errorf("moving the sandbox's init into %s: %w", sup, err)
	}
	// Bounds on what systemd makes below (these files stay root's): a
	// chain deeper than PATH_MAX could not be removed by path, and would
	// outlive the sandbox in the host's kernel.
	for f, v := range map[string]string{"cgroup.max.depth": strconv.Itoa(maxPayloadDepth), "cgroup.max.descendants": strconv.Itoa(maxPayloadCgroups)} {
		if err := os.WriteFile(filepath.Join(payload, f), []byte(v), 0); err != nil {
			return nil, fmt.Errorf("bounding %s: %w", payload, err)
		}
	}
	for _, f := range []string{"", "/cgroup.procs", "/cgroup.threads", "/cgroup.subtree_control"} {
		if err := os.Lchown(payload+f, int(uid), int(gid)); err != nil {
			return nil, fmt.Errorf("delegating %s to the sandbox's root: %w", payload, err)
		}
	}
	f, err := os.OpenFile(payload+"/cgroup.procs", os.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("opening %s/cgroup.procs: %w", payload, err)
	}
	return f, nil
}

const cgroupPrefix = "command-"

// CloseFiles closes the descriptors, once the init has its copies.
func (c *Command) CloseFiles() {
	for _, f := range []**os.File{&c.Dir, &c.Procs, &c.Kill, &c.ParentProcs} {
		if *f != nil {
			(*f).Close()
			*f = nil
		}
	}
}

// Remove closes the descriptors and removes the cgroup, once the init has
// emptied it (EBUSY is retried a little: the last processes may still be
// exiting).
func (c *Command) Remove() error {
	c.CloseFiles()
	var err error
	for range 50 {
		if err = unix.Rmdir(c.path); err == nil || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("removing cgroup %s: %w", c.path, err)
}

// Received is the init's side: the command's cgroup and its own, as the
// request's last Files descriptors brought them (FromFiles).
type Received struct {
	dir, procs, killer, parentProcs *os.File
	// safe is set once the init is back in its own cgroup after the fork:
	// only then may the whole command cgroup be killed.
	safe bool
}

// Files is how many descriptors a request's cgroup takes.
const Files = 4

// FromFiles is the cgroup whose descriptors are files (Files of them, in
// Command.Files's order).
func FromFiles(files []*os.File) *Received {
	return &Received{dir: files[0], procs: files[1], killer: files[2], parentProcs: files[3]}
}

// Enter moves the init (all of it: cgroup v2 moves processes) into the
// command's cgroup, so that the command is forked there; Leave moves it
// back. Forks are serialized, and nothing else of the init forks.
func (c *Received) Enter() error { return write(c.procs, "cgroup.procs", "0") }

func (c *Received) Leave() error {
	if err := write(c.parentProcs, "cgroup.procs", "0"); err != nil {
		return err
	}
	c.safe = true
	return nil
}

// Kill ends every process in the command's cgroup, and waits (a little)
// until they are gone. With the init itself possibly inside (leave
// failed), it kills by pid, sparing the init.
func (c *Received) Kill() {
	if c.safe && write(c.killer, "cgroup.kill", "1") == nil {
		c.waitEmpty()
		return
	}
	for range 100 { // what forks meanwhile is killed in the next round
		pids := c.pids()
		if len(pids) == 0 {
			return
		}
		for _, p := range pids {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (c *Received) waitEmpty() {
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		b, err := readAt(c.dir, "cgroup.events")
		if err != nil || bytes.Contains(b, []byte("populated 0")) {
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// pids are the cgroup's processes but the init (pid 1), in the init's
// PID namespace.
func (c *Received) pids() []int {
	b, err := readAt(c.dir, "cgroup.procs")
	if err != nil {
		return nil
	}
	var out []int
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if p, err := strconv.Atoi(sc.Text()); err == nil && p > 1 && p != os.Getpid() {
			out = append(out, p)
		}
	}
	return out
}

// Close closes the descriptors.
func (c *Received) Close() {
	for _, f := range []*os.File{c.dir, c.procs, c.killer, c.parentProcs} {
		if f != nil {
			f.Close()
		}
	}
}

func write(f *os.File, name, value string) error {
	if _, err := unix.Write(int(f.Fd()), []byte(value)); err != nil {
		return fmt.Errorf("writing %s of the command's cgroup: %w", name, err)
	}
	return nil
}

func readAt(dir *os.File, name string) ([]byte, error) {
	fd, err := unix.Openat(int(dir.Fd()), name, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	var buf bytes.Buffer
	_, err = buf.ReadFrom(f)
	return buf.Bytes(), err
}
