// Package changewatch tells whether a project's volume changed since a
// mark: the ground a warm pool of sandboxes stands on (issue 34; the design
// note is docs/design-warmpool.md). A pool marks its project before it takes
// a pool sandbox's snapshot and asks, when a create claims that sandbox,
// whether anything was written to the project since the mark; if so the
// sandbox is not handed out.
//
// Two mechanisms, both measured by the tests:
//
//   - Watcher: one fanotify group per filesystem (FAN_CLASS_NOTIF,
//     FAN_REPORT_FID, FAN_MARK_FILESYSTEM) with the events of every
//     modification; an event is the project's when its file handle names
//     the project's subvolume (btrfs handles carry the subvolume's id) or,
//     on another filesystem, when its fsid is the project's. A queue
//     overflow is a change of every project. Alone it misses a write
//     through a shared mapping whose file is still open (page faults make
//     no event); Begin and Unchanged close that with Writers, the
//     descriptors open for writing and shared mappings found in /proc.
//   - Generation: btrfs's generation of the project's subvolume after a
//     syncfs (BTRFS_IOC_GET_SUBVOL_INFO) against the transaction its
//     snapshot was taken in (the snapshot's otransid). Sees everything that
//     reached the tree, mappings included, at the cost of a syncfs.
package changewatch

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Events is the modification mask the Watcher asks for: data, metadata
// (mode, owner, times, xattrs), names (create, delete, rename) and the
// watched directory itself being removed or moved.
const Events = unix.FAN_MODIFY | unix.FAN_CLOSE_WRITE | unix.FAN_ATTRIB |
	unix.FAN_CREATE | unix.FAN_DELETE | unix.FAN_MOVED_FROM | unix.FAN_MOVED_TO |
	unix.FAN_DELETE_SELF | unix.FAN_MOVE_SELF | unix.FAN_ONDIR

// opened is what Opened counts: a file of the project opened (in any mode)
// is how a write through a mapping begins, which itself makes no event.
const opened = unix.FAN_OPEN

var (
	// ErrClosed is returned by a Watcher's calls after Close.
	ErrClosed = errors.New("changewatch: watcher closed")
	// ErrNotBtrfs is returned by Generation for a directory not on btrfs.
	ErrNotBtrfs = errors.New("changewatch: not a btrfs subvolume")
)

// fsid is a filesystem id as statfs(2) and fanotify report it.
type fsid [2]int32

// Project is a watched project: a directory the Watcher reports changes of.
type Project struct {
	Dir     string
	fsid    fsid
	subvol  uint64 // btrfs subvolume id (tree id) of Dir; 0 if not btrfs
	changes uint64 // modifications seen for it
	opens   uint64 // opens seen for it
}

// Mark is where a project stood when Watcher.Mark was called.
type Mark struct {
	changes, opens, overflows uint64
	writers                   []string // Writers at the mark (Begin only)
}

// Watcher is one fanotify group with a filesystem mark on one filesystem.
// Its methods are safe for concurrent use.
type Watcher struct {
	mu        sync.Mutex
	fd        int
	projects  []*Project
	overflows uint64
	other     uint64 // events of no watched project
	buf       []byte
}

// NewWatcher makes a fanotify group (root only: CAP_SYS_ADMIN) and marks the
// whole filesystem that holds dir. Every later modification on it is
// queued; the queue is read as Mark and Changed are called, or by Drain.
func NewWatcher(dir string) (*Watcher, error) {
	fd, err := unix.FanotifyInit(unix.FAN_CLASS_NOTIF|unix.FAN_REPORT_FID|unix.FAN_CLOEXEC|unix.FAN_NONBLOCK, unix.O_RDONLY|unix.O_LARGEFILE)
	if err != nil {
		return nil, fmt.Errorf("fanotify_init: %w", err)
	}
	if err := unix.FanotifyMark(fd, unix.FAN_MARK_ADD|unix.FAN_MARK_FILESYSTEM, Events|opened, unix.AT_FDCWD, dir); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("fanotify_mark filesystem of %s: %w", dir, err)
	}
	return &Watcher{fd: fd, buf: make([]byte, 64<<10)}, nil
}

// FD is the group's descriptor, for a caller that polls it to Drain.
func (w *Watcher) FD() int { return w.fd }

// Watch adds a project at dir (a btrfs subvolume's top, or a directory whose
// fsid is its own, such as a ZFS dataset's mountpoint). Dir must be on the
// Watcher's filesystem.
func (w *Watcher) Watch(dir string) (*Project, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return nil, fmt.Errorf("statfs %s: %w", dir, err)
	}
	p := &Project{Dir: dir, fsid: fsid(st.Fsid.Val)}
	if st.Type == unix.BTRFS_SUPER_MAGIC {
		info, err := Generation(dir)
		if err != nil {
			return nil, err
		}
		p.subvol = info.TreeID
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fd < 0 {
		return nil, ErrClosed
	}
	if err := w.drainLocked(); err != nil {
		return nil, err
	}
	w.projects = append(w.projects, p)
	return p, nil
}

// Unwatch stops counting p's events (a project gone, or watched again).
func (w *Watcher) Unwatch(p *Project) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if i := slices.Index(w.projects, p); i >= 0 {
		w.projects = slices.Delete(w.projects, i, i+1)
	}
}

// Same says whether p.Dir is still the volume p was watched as: a btrfs
// subvolume swapped in at the same path (a promotion's switch) is not.
func (p *Project) Same() (bool, error) {
	if p.subvol == 0 {
		return true, nil
	}
	info, err := Generation(p.Dir)
	if err != nil {
		return false, err
	}
	return info.TreeID == p.subvol, nil
}

// Mark drains the queue and says where p stands now: every modification
// whose call returned before Mark is behind the mark.
func (w *Watcher) Mark(p *Project) (Mark, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.drainLocked(); err != nil {
		return Mark{}, err
	}
	return Mark{changes: p.changes, opens: p.opens, overflows: w.overflows}, nil
}

// Changed drains the queue and reports whether p was modified since m, or
// the queue overflowed (which counts as a change of every project). A
// modification whose call returned before Changed is counted.
func (w *Watcher) Changed(p *Project, m Mark) (bool, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.drainLocked(); err != nil {
		return true, err
	}
	return p.changes != m.changes || w.overflows != m.overflows, nil
}

// Begin is the pool's mark, to take before a pool sandbox's snapshot: Mark,
// then Writers of the project (after the mark, so that a writer closed in
// between left a FAN_CLOSE_WRITE behind it).
func (w *Watcher) Begin(p *Project) (Mark, error) {
	m, err := w.Mark(p)
	if err != nil {
		return m, err
	}
	if m.writers, err = Writers(p.Dir); err != nil {
		return m, err
	}
	return m, nil
}

// Suspect lists the writers Begin found: a sandbox marked while they were
// there is never clean (a shared mapping can write without an event).
func (m Mark) Suspect() []string { return m.writers }

// Unchanged is the pool's check at claim, against a Mark from Begin: no
// modification since, no overflow, no writer at the mark, and if a file of
// the project was opened since, no writer now. False is "do not hand the
// sandbox out"; an error is false too.
func (w *Watcher) Unchanged(p *Project, m Mark) (bool, error) {
	if len(m.writers) > 0 {
		return false, nil
	}
	if c, err := w.Changed(p, m); c || err != nil {
		return false, err
	}
	o, err := w.Opened(p, m)
	if err != nil {
		return false, err
	}
	if !o {
		return true, nil
	}
	now, err := Writers(p.Dir)
	return err == nil && len(now) == 0, err
}

// Opened drains the queue and reports whether a file of p was opened since
// m (or the queue overflowed). A write through a shared mapping makes no
// event; the mapping needs a file opened for writing, either before the
// mark (Writers at the mark finds it) or after it (Opened says so, and
// Writers at the check finds it if it is still open; once closed, its
// FAN_CLOSE_WRITE made it a change).
func (w *Watcher) Opened(p *Project, m Mark) (bool, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.drainLocked(); err != nil {
		return true, err
	}
	return p.opens != m.opens || w.overflows != m.overflows, nil
}

// Drain reads the queued events (a caller polling FD calls it when the
// descriptor is readable, so the queue does not overflow between marks).
func (w *Watcher) Drain() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.drainLocked()
}

// Counts says how many events were of no watched project and how many
// overflows there were, for the tests and metrics.
func (w *Watcher) Counts() (other, overflows uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.other, w.overflows
}

// Close closes the group.
func (w *Watcher) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fd < 0 {
		return nil
	}
	err := unix.Close(w.fd)
	w.fd = -1
	return err
}

const (
	metaLen       = 24 // struct fanotify_event_metadata
	infoHdrLen    = 4  // struct fanotify_event_info_header
	fileHandleLen = 8  // struct file_handle without f_handle
	// FILEID_BTRFS_WITH_PARENT and kin: a btrfs handle starts with the
	// inode's objectid (u64) then its subvolume's root objectid (u64).
	fileidBtrfsWithoutParent = 0x4d
	fileidBtrfsWithParent    = 0x4e
	fileidBtrfsWithParentRt  = 0x4f
)

func (w *Watcher) drainLocked() error {
	if w.fd < 0 {
		return ErrClosed
	}
	for {
		n, err := unix.Read(w.fd, w.buf)
		if err == unix.EAGAIN || n == 0 {
			return nil
		}
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return fmt.Errorf("reading fanotify events: %w", err)
		}
		w.parse(w.buf[:n])
	}
}

func (w *Watcher) parse(b []byte) {
	for len(b) >= metaLen {
		evLen := int(binary.NativeEndian.Uint32(b[0:4]))
		mask := binary.NativeEndian.Uint64(b[8:16])
		fd := int32(binary.NativeEndian.Uint32(b[16:20]))
		if evLen < metaLen || evLen > len(b) {
			w.overflows++ // a record we cannot read: count it as a change
			return
		}
		if fd >= 0 {
			unix.Close(int(fd))
		}
		if mask&unix.FAN_Q_OVERFLOW != 0 {
			w.overflows++
		} else {
			w.attribute(mask, b[metaLen:evLen])
		}
		b = b[evLen:]
	}
}

// attribute counts an event for each watched project its info records name.
// An event with no record we can read counts for every project.
func (w *Watcher) attribute(mask uint64, info []byte) {
	// A directory's open (FAN_ONDIR: events merge only per object, so the
	// flag names the object) cannot lead to a mapping: not an open here.
	change, open := mask&Events&^unix.FAN_ONDIR != 0, mask&opened != 0 && mask&unix.FAN_ONDIR == 0
	matched, read := false, false
	for len(info) >= infoHdrLen {
		typ := info[0]
		l := int(binary.NativeEndian.Uint16(info[2:4]))
		if l < infoHdrLen || l > len(info) {
			break
		}
		rec := info[:l]
		info = info[l:]
		if typ != unix.FAN_EVENT_INFO_TYPE_FID && typ != unix.FAN_EVENT_INFO_TYPE_DFID && typ != unix.FAN_EVENT_INFO_TYPE_DFID_NAME {
			continue
		}
		if len(rec) < infoHdrLen+8+fileHandleLen {
			continue
		}
		read = true
		id := fsid{int32(binary.NativeEndian.Uint32(rec[4:8])), int32(binary.NativeEndian.Uint32(rec[8:12]))}
		hbytes := int(binary.NativeEndian.Uint32(rec[12:16]))
		htype := int32(binary.NativeEndian.Uint32(rec[16:20]))
		handle := rec[20:]
		if hbytes < len(handle) {
			handle = handle[:hbytes]
		}
		root, isBtrfs := btrfsRoot(htype, handle)
		for _, p := range w.projects {
			if (p.subvol != 0 && isBtrfs && root == p.subvol) || (p.subvol == 0 && id == p.fsid) {
				p.count(change, open)
				matched = true
			}
		}
	}
	if !read {
		for _, p := range w.projects {
			p.count(true, true)
		}
		matched = true
	}
	if !matched {
		w.other++
	}
}

func (p *Project) count(change, open bool) {
	if change {
		p.changes++
	}
	if open {
		p.opens++
	}
}

func btrfsRoot(htype int32, h []byte) (uint64, bool) {
	switch htype {
	case fileidBtrfsWithoutParent, fileidBtrfsWithParent, fileidBtrfsWithParentRt:
		if len(h) >= 16 {
			return binary.LittleEndian.Uint64(h[8:16]), true
		}
	}
	return 0, false
}

// SubvolInfo is what BTRFS_IOC_GET_SUBVOL_INFO says of a subvolume.
type SubvolInfo struct {
	TreeID     uint64 // the subvolume's id
	Generation uint64 // the last transaction that changed its tree
	CTransID   uint64 // the last transaction that changed an inode in it
	OTransID   uint64 // the transaction it was made in (a snapshot's: taken)
}

// struct btrfs_ioctl_get_subvol_info_args (504 bytes).
type subvolInfoArgs struct {
	treeid       uint64
	name         [256]byte
	parentID     uint64
	dirid        uint64
	generation   uint64
	flags        uint64
	uuid         [16]byte
	parentUUID   [16]byte
	receivedUUID [16]byte
	ctransid     uint64
	otransid     uint64
	stransid     uint64
	rtransid     uint64
	ctime        [2]uint64
	otime        [2]uint64
	stime        [2]uint64
	rtime        [2]uint64
	reserved     [8]uint64
}

const iocGetSubvolInfo = 0x81f8943c // _IOR(0x94, 60, struct btrfs_ioctl_get_subvol_info_args)

// Generation reads the subvolume info of the btrfs subvolume holding dir
// (unprivileged: the ioctl needs only an open descriptor). It does not
// sync: a change not yet committed is not in it (see Sync).
func Generation(dir string) (SubvolInfo, error) {
	f, err := os.Open(dir)
	if err != nil {
		return SubvolInfo{}, err
	}
	defer f.Close()
	var a subvolInfoArgs
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), iocGetSubvolInfo, uintptr(unsafe.Pointer(&a))); e != 0 {
		if e == unix.ENOTTY || e == unix.EINVAL {
			return SubvolInfo{}, fmt.Errorf("%w: %s", ErrNotBtrfs, dir)
		}
		return SubvolInfo{}, fmt.Errorf("BTRFS_IOC_GET_SUBVOL_INFO %s: %w", dir, e)
	}
	return SubvolInfo{TreeID: a.treeid, Generation: a.generation, CTransID: a.ctransid, OTransID: a.otransid}, nil
}

// Sync commits the filesystem holding dir (syncfs(2)): after it, every
// change made before it is in the subvolumes' generations.
func Sync(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.Syncfs(int(f.Fd())); err != nil {
		return fmt.Errorf("syncfs %s: %w", dir, err)
	}
	return nil
}

// ChangedSinceSnapshot reports whether the project at dir changed after the
// snapshot at snap was taken from it: after a syncfs, the project's
// generation is later than the transaction the snapshot was made in.
func ChangedSinceSnapshot(dir, snap string) (bool, error) {
	s, err := Generation(snap)
	if err != nil {
		return true, err
	}
	if err := Sync(dir); err != nil {
		return true, err
	}
	p, err := Generation(dir)
	if err != nil {
		return true, err
	}
	return p.Generation > s.OTransID, nil
}
