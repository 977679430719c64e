package adopt

// The processes that hold a directory being adopted or released, found
// by what their files ARE, not by the path strings /proc shows: a
// sandbox's process whose working directory is its overlay's view of
// /srv/x shows "/srv/x", yet uses a file of the overlay, not the host's
// /srv/x. A file is under the tree when it was reached through a mount
// of the tree's filesystem (its mount id, from statx) at a place of that
// filesystem (the mount's root in it, and the path below the mount)
// within the tree's own place there.

import (
	"bufio"
	"fmt"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/subtree"
	"github.com/sandboxd/sandboxd/supervisor"
)

// holder is a process that uses a directory: its pid and description
// ("pid N (comm)"), and the unit systemd says it is of (servicesOf).
// started is its start time (/proc/PID/stat), read before the walk read
// what it uses: the same pid with another start time is another process.
type holder struct {
	pid     int
	what    string
	started string
}

// mountEntry is a line of a mountinfo: the filesystem's device
// (major:minor, the same for every mount of one filesystem), the
// directory of that filesystem the mount shows, and where, in the view of
// the process whose mountinfo it is.
type mountEntry struct {
	dev, root, point string
}

// mountTable is one view's mounts, by mount id and in order.
type mountTable struct {
	byID  map[uint64]mountEntry
	order []mountEntry
}

// readMounts parses the mountinfo at file.
func readMounts(file string) (*mountTable, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	t := &mountTable{byID: map[uint64]mountEntry{}}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		// id parent major:minor root mountpoint ...
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		id, err := strconv.ParseUint(fields[0], 10, 64)
		if err != nil {
			continue
		}
		m := mountEntry{dev: fields[2], root: unescapeMount(fields[3]), point: unescapeMount(fields[4])}
		t.byID[id] = m
		t.order = append(t.order, m)
	}
	return t, sc.Err()
}

// place is a directory of a filesystem: its device (as mountinfo says
// it) and its path from the filesystem's root.
type place struct{ dev, fsPath string }

// placeOf is where in its filesystem path (a path in the daemon's view,
// not a symlink at its end) is, by the mount statx says it was reached
// through.
func placeOf(p string) (place, error) {
	var stx unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, p, unix.AT_SYMLINK_NOFOLLOW, unix.STATX_MNT_ID, &stx); err != nil {
		return place{}, fmt.Errorf("reading what %s is: %w", p, err)
	}
	t, err := readMounts("/proc/self/mountinfo")
	if err != nil {
		return place{}, fmt.Errorf("reading the mounts %s is under: %w", p, err)
	}
	m, ok := t.byID[stx.Mnt_id]
	if !ok || !subtree.Within(p, m.point) {
		return place{}, fmt.Errorf("%s is reached through mount %d, which the daemon's mount table does not show there", p, stx.Mnt_id)
	}
	return place{m.dev, fsPathOf(m, p)}, nil
}

// fsPathOf is where p, a path below mount m's mount point, is in m's
// filesystem.
func fsPathOf(m mountEntry, p string) string {
	return path.Join(m.root, strings.TrimPrefix(p, m.point))
}

// holderScan is one walk of /proc for the processes that use any of
// places. Each view's mount table is read once (processes of one mount
// namespace and root share it).
type holderScan struct {
	places []place
	devs   map[string]bool
	// hexDevs are devs as maps writes them (" 08:01 ").
	hexDevs []string
	tables  map[string]*mountTable
	// looked is the threads, descriptors and mounts looked at so far,
	// at most maxWalk.
	looked int
}

// maxWalk bounds one walk: the threads, descriptors and mount tables'
// lines it looks at, over all processes. Each costs a few system calls (measured: 1,000
// processes holding 1,000 descriptors each took 21 s on a loaded 2-core
// machine), and any user may hold as many as its limits allow, so that
// an unbounded walk would keep services stopped or frozen, and a release
// waiting, for as long as a user chose. Past it the walk fails: such a
// user could keep the directory from being adopted anyway, by using it.
var maxWalk = 1 << 20

// holders names the processes that use what is under any of paths: their
// working directory or root there, or a file of it open or mapped. One
// walk of /proc, whatever the number of paths; at most 10 are named
// (then an entry of pid 0 says there may be more).
func holders(paths ...string) ([]holder, error) {
	sc := &holderScan{devs: map[string]bool{}, tables: map[string]*mountTable{}}
	for _, p := range paths {
		pl, err := placeOf(p)
		if err != nil {
			return nil, fmt.Errorf("finding the processes that use %s: %w", p, err)
		}
		sc.places = append(sc.places, pl)
		sc.devs[pl.dev] = true
		var maj, min uint64
		if _, err := fmt.Sscanf(pl.dev, "%d:%d", &maj, &min); err == nil {
			sc.hexDevs = append(sc.hexDevs, fmt.Sprintf(" %02x:%02x ", maj, min))
		}
	}
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("finding the processes that use %s: %w", strings.Join(paths, ", "), err)
	}
	self := os.Getpid()
	var out []holder
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil || pid == self {
			continue
		}
		started, err := startTime(pid)
		if err != nil {
			continue // gone
		}
		used := sc.uses(pid)
		if sc.looked > maxWalk {
			return nil, fmt.Errorf("finding the processes that use %s: the processes of this machine have more than %d threads, open descriptors and mounts, more than sandboxd looks through: find its users yourself (fuser -vm, lsof) and stop them, then adopt or release it with none left: %w",
				strings.Join(paths, ", "), maxWalk, supervisor.ErrProjectInUse)
		}
		if used {
			h := describeProcess(pid)
			h.started = started
			out = append(out, h)
			if len(out) == 10 {
				return append(out, holder{what: "maybe more"}), nil
			}
		}
	}
	return out, nil
}

// uses says whether process pid uses any of sc's places, through any of
// its threads: a thread may have a working directory and root of its
// own (unshare(CLONE_FS)) or a table of descriptors of its own, and once
// the thread group's leader has exited (a bare exit(2) of the main
// thread) /proc/PID/cwd, root, fd and maps show nothing, while its other
// threads still work in the tree, hold its files and map them. So each
// thread's (/proc/PID/task/TID) are read: its working directory and
// root; its descriptors unless it shares the table of a thread already
// read (kcmp); the maps, which all the threads share, from the first
// thread that shows them.
func (sc *holderScan) uses(pid int) bool {
	dir := "/proc/" + strconv.Itoa(pid)
	tasks, err := os.ReadDir(dir + "/task")
	if err != nil {
		return false // gone
	}
	var fdsRead []int // threads whose descriptor tables were read
	mapsRead := false
	for _, task := range tasks {
		tid, err := strconv.Atoi(task.Name())
		if err != nil {
			continue
		}
		if sc.looked++; sc.looked > maxWalk {
			return false
		}
		if sc.taskUses(pid, tid, &fdsRead, &mapsRead) {
			return true
		}
	}
	return false
}

// taskUses says whether thread tid of process pid uses any of sc's
// places; fdsRead and mapsRead say what of the process was read already.
func (sc *holderScan) taskUses(pid, tid int, fdsRead *[]int, mapsRead *bool) bool {
	dir := "/proc/" + strconv.Itoa(pid) + "/task/" + strconv.Itoa(tid)
	// Paths in /proc (readlink, maps) are as the daemon's root sees them,
	// or, out of its reach (another mount namespace), from that
	// namespace's root; the thread's mountinfo is from its own root.
	// Both are taken from the one the thread's root link shows.
	root, err := os.Readlink(dir + "/root")
	if err != nil {
		return false // gone, an exited leader, or a kernel thread
	}
	var table *mountTable
	view := func() *mountTable {
		if table != nil {
			return table
		}
		ns, _ := os.Readlink(dir + "/ns/mnt")
		key := ns + "\x00" + root
		t, ok := sc.tables[key]
		if !ok {
			var err error
			// Not kept when unread or cut short (the thread is gone):
			// another thread of that view, read next, is not to be
			// judged by an empty table.
			if t, err = readMounts(dir + "/mountinfo"); err != nil {
				return nil
			}
			// A user may make mount namespaces of many mounts each:
			// their tables, kept for the walk, count toward its bound.
			sc.looked += len(t.order)
			sc.tables[key] = t
		}
		table = t
		return t
	}
	for _, l := range []string{"cwd", "root"} {
		if sc.objectUses(dir+"/"+l, root, view) {
			return true
		}
	}
	if !slices.ContainsFunc(*fdsRead, func(other int) bool { return sameFiles(other, tid) }) {
		*fdsRead = append(*fdsRead, tid)
		if sc.fdsUse(dir, root, view) {
			return true
		}
	}
	if *mapsRead {
		return false
	}
	data, err := os.ReadFile(dir + "/maps")
	if err != nil || len(data) == 0 {
		return false // an exited leader's: a live thread's shows them
	}
	*mapsRead = true
	return sc.mapsUse("/proc/"+strconv.Itoa(pid), data, root, view)
}

// fdsUse says whether a descriptor of the thread at dir is of a file
// under one of sc's places; read a batch at a time, so that a table of a
// million costs no more memory than one of a thousand.
func (sc *holderScan) fdsUse(dir, root string, view func() *mountTable) bool {
	d, err := os.Open(dir + "/fd")
	if err != nil {
		return false
	}
	defer d.Close()
	for {
		fds, err := d.ReadDir(1024)
		if sc.looked += len(fds); sc.looked > maxWalk {
			return false
		}
		for _, fd := range fds {
			if sc.objectUses(dir+"/fd/"+fd.Name(), root, view) {
				return true
			}
		}
		if err != nil {
			return false // io.EOF: all read
		}
	}
}

// sameFiles says whether threads a and b share one table of descriptors
// (kcmp KCMP_FILES: 0 when they do); when the kernel cannot say, they
// are taken as not sharing it, and each table is read.
func sameFiles(a, b int) bool {
	const kcmpFiles = 2 // KCMP_FILES, <linux/kcmp.h>
	r, _, errno := unix.Syscall6(unix.SYS_KCMP, uintptr(a), uintptr(b), kcmpFiles, 0, 0, 0)
	return errno == 0 && r == 0
}

// objectUses says whether the file the magic link at link (a process's
// cwd, root or fd) leads to is under one of sc's places.
func (sc *holderScan) objectUses(link, root string, view func() *mountTable) bool {
	var stx unix.Statx_t
	if unix.Statx(unix.AT_FDCWD, link, 0, unix.STATX_MNT_ID, &stx) != nil {
		return false
	}
	t := view()
	if t == nil {
		return false
	}
	m, ok := t.byID[stx.Mnt_id]
	if !ok || !sc.devs[m.dev] {
		// Through a mount of another filesystem (an overlay that shows
		// the tree's path, a copy), or of none in the process's view (a
		// socket's, a pipe's): not the tree's file.
		return false
	}
	target, err := os.Readlink(link)
	if err != nil || !strings.HasPrefix(target, "/") {
		return false
	}
	return sc.under(m, target, root)
}

// under says whether target (a path /proc showed, the process's root
// being root), reached through mount m of a place's filesystem, is under
// that place. One it cannot place in m (a lazily unmounted tree) counts:
// it is of that filesystem.
func (sc *holderScan) under(m mountEntry, target, root string) bool {
	p, ok := inRoot(strings.TrimSuffix(target, " (deleted)"), root)
	if !ok || !subtree.Within(p, m.point) {
		return true
	}
	fp := fsPathOf(m, p)
	for _, pl := range sc.places {
		if pl.dev == m.dev && subtree.Within(fp, pl.fsPath) {
			return true
		}
	}
	return false
}

// inRoot is target as seen from root (both as /proc shows them), or
// false when it is outside.
func inRoot(target, root string) (string, bool) {
	if root == "/" {
		return target, true
	}
	if !subtree.Within(target, root) {
		return "", false
	}
	return "/" + strings.TrimPrefix(strings.TrimPrefix(target, root), "/"), true
}

// mapsUse says whether a file mapped by process procDir's threads (data,
// their maps) is under one of sc's places: of the place's device, reached
// through a mount of that filesystem (not an overlay's view of it).
func (sc *holderScan) mapsUse(procDir string, data []byte, root string, view func() *mountTable) bool {
	if !slices.ContainsFunc(sc.hexDevs, func(d string) bool { return strings.Contains(string(data), d) }) {
		return false // (most processes map nothing of the tree's filesystem)
	}
	seen := map[string]bool{}
	for rest := string(data); rest != ""; {
		var line string
		line, rest, _ = strings.Cut(rest, "\n")
		if !slices.ContainsFunc(sc.hexDevs, func(d string) bool { return strings.Contains(line, d) }) {
			continue
		}
		// start-end perms offset major:minor inode path
		f := strings.Fields(line)
		if len(f) < 6 || f[4] == "0" || !strings.HasPrefix(f[5], "/") {
			continue
		}
		target := strings.Join(f[5:], " ")
		if seen[target] || !sc.devs[decimalDev(f[3])] {
			continue
		}
		seen[target] = true
		// Best, the mapping's own file (map_files, root's only): the
		// mount it was reached through, as for a descriptor. A path
		// tells less: the process may since have mounted something
		// over the place it mapped the file from, in a mount namespace
		// of its own, and the path's mount in its view is then that.
		// (Of the process's directory: a thread's has none. An exited
		// leader's shows none: the path, then.)
		link := procDir + "/map_files/" + f[0]
		var stx unix.Statx_t
		if unix.Statx(unix.AT_FDCWD, link, 0, unix.STATX_MNT_ID, &stx) == nil {
			if sc.objectUses(link, root, view) {
				return true
			}
			continue
		}
		t := view()
		if t == nil {
			continue
		}
		p, ok := inRoot(strings.TrimSuffix(target, " (deleted)"), root)
		if !ok {
			return true
		}
		// The mount the path is under in the process's view: the last
		// (uppermost) of the longest mount point that holds it.
		var m *mountEntry
		for i := range t.order {
			e := &t.order[i]
			if subtree.Within(p, e.point) && (m == nil || len(e.point) >= len(m.point)) {
				m = e
			}
		}
		if m != nil && sc.devs[m.dev] && sc.under(*m, target, root) {
			return true
		}
	}
	return false
}

// decimalDev turns maps' device ("08:01", hexadecimal) into mountinfo's
// ("8:1").
func decimalDev(hex string) string {
	maj, min, ok := strings.Cut(hex, ":")
	a, err1 := strconv.ParseUint(maj, 16, 32)
	b, err2 := strconv.ParseUint(min, 16, 32)
	if !ok || err1 != nil || err2 != nil {
		return ""
	}
	return fmt.Sprintf("%d:%d", a, b)
}

// describeProcess is the holder pid is: "pid N (comm)".
func describeProcess(pid int) holder {
	comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	return holder{pid: pid, what: fmt.Sprintf("pid %d (%s)", pid, strings.TrimSpace(string(comm)))}
}

// startTime is process pid's start time, in clock ticks since boot
// (field 22 of /proc/PID/stat, after the comm in parentheses, which may
// hold spaces and parentheses itself).
func startTime(pid int) (string, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "", err
	}
	i := strings.LastIndexByte(string(b), ')')
	f := strings.Fields(string(b[i+1:]))
	if i < 0 || len(f) < 20 {
		return "", fmt.Errorf("reading the start time of pid %d: %q is no process's stat", pid, b)
	}
	return f[19], nil // state is field 3, the first after the comm
}

// sameProcess says whether h's pid is still the process the walk found.
func (h holder) sameProcess() bool {
	started, err := startTime(h.pid)
	return err == nil && started == h.started
}
