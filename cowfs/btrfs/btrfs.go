// Package btrfs is the cowfs backend for btrfs: volumes are subvolumes,
// sandboxd's own are those directly under its root directory (the path
// convention that marks them), and snapshots, deletion and sends go through
// the kernel's ioctls (github.com/dennwc/btrfs, and ioctl.go for what it
// lacks).
package btrfs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	dbtrfs "github.com/dennwc/btrfs"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/cowfs/internal/command"
	"github.com/sandboxd/sandboxd/cowfs/sendstream"
)

// tmpPrefix names the subvolumes and directories a multi-step operation
// makes under the root before it renames them into place. No volume name
// may start with '.', so they never show as volumes; Open removes any that
// a crash left.
const tmpPrefix = ".tmp-"

// Backend is a btrfs pool rooted at a directory.
type Backend struct {
	root  string // absolute, clean
	mount string // mount point of the filesystem holding root
	fsid  string // filesystem UUID, to tell whether a project is in the pool
	info  cowfs.Info

	quotaOnce sync.Once
	quotaErr  error
}

var _ cowfs.Backend = (*Backend)(nil)

// Open opens (making it if needed) the root directory on a btrfs
// filesystem. A root on another filesystem is ErrUnsupportedFS, naming the
// filesystem found.
func Open(ctx context.Context, root string) (*Backend, error) {
	if !filepath.IsAbs(root) {
		return nil, fmt.Errorf("opening btrfs root %q: not an absolute path: %w", root, cowfs.ErrInvalidName)
	}
	root = filepath.Clean(root)
	parent := filepath.Dir(root)
	if _, err := os.Stat(parent); err != nil {
		return nil, fmt.Errorf("opening btrfs root %s: %w", root, notFound(err))
	}
	if err := checkBtrfs(parent); err != nil {
		return nil, fmt.Errorf("opening btrfs root %s: %w", root, err)
	}
	if err := os.Mkdir(root, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("making btrfs root %s: %w", root, err)
	}
	if err := checkBtrfs(root); err != nil {
		return nil, fmt.Errorf("opening btrfs root %s: %w", root, err)
	}
	b := &Backend{root: root}
	var err error
	if b.mount, err = mountPoint(root); err != nil {
		return nil, fmt.Errorf("opening btrfs root %s: %w", root, err)
	}
	// The root may be a plain directory; the mount point is a subvolume.
	if b.fsid, err = fsid(b.mount); err != nil {
		return nil, fmt.Errorf("opening btrfs root %s: %w", root, err)
	}
	var uts unix.Utsname
	_ = unix.Uname(&uts)
	kernel := unix.ByteSliceToString(uts.Release[:])
	b.info = cowfs.Info{
		Backend: "btrfs",
		Root:    root,
		Version: "kernel " + kernel,
		Capabilities: cowfs.Capabilities{
			WritableSnapshots:    true,
			IndependentSnapshots: true,
			FastChanges:          true,
			Generation:           true,
			Quota:                true,
			SimpleQuota:          kernelAtLeast(kernel, 6, 7),
			OverlayUpper:         true,
		},
	}
	if err := b.removeLeftovers(ctx); err != nil {
		return nil, err
	}
	return b, nil
}

func (b *Backend) Info() cowfs.Info { return b.info }

func (b *Backend) Close() error { return nil }

// checkBtrfs says ErrUnsupportedFS unless path is on btrfs.
func checkBtrfs(path string) error {
	magic, name, err := cowfs.FSType(path)
	if err != nil {
		return err
	}
	if magic != cowfs.MagicBtrfs {
		return fmt.Errorf("%s is on %s, not btrfs: %w", path, name, cowfs.ErrUnsupportedFS)
	}
	return nil
}

func fsid(path string) (string, error) {
	fs, err := dbtrfs.Open(path, true)
	if err != nil {
		return "", err
	}
	defer fs.Close()
	info, err := fs.Info()
	if err != nil {
		return "", fmt.Errorf("reading the filesystem id: %w", err)
	}
	// The form /sys/fs/btrfs/ uses: 8-4-4-4-12 hex digits.
	h := info.FSID.String()
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:], nil
}

// mountPoint finds the mount point of the filesystem that holds path: the
// deepest mount in mountinfo that is a prefix of path.
func mountPoint(path string) (string, error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	best := ""
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		mp := f[4]
		if (path == mp || strings.HasPrefix(path, strings.TrimSuffix(mp, "/")+"/")) && len(mp) > len(best) {
			best = mp
		}
	}
	if best == "" {
		return "", fmt.Errorf("no mount point found for %s", path)
	}
	return best, nil
}

func kernelAtLeast(release string, major, minor int) bool {
	parts := strings.SplitN(release, ".", 3)
	if len(parts) < 2 {
		return false
	}
	ma, _ := strconv.Atoi(parts[0])
	mi, _ := strconv.Atoi(strings.TrimFunc(parts[1], func(r rune) bool { return r < '0' || r > '9' }))
	return ma > major || ma == major && mi >= minor
}

// removeLeftovers deletes what a crash left in the middle of a multi-step
// operation: temporary subvolumes and directories under the root.
func (b *Backend) removeLeftovers(ctx context.Context) error {
	entries, err := os.ReadDir(b.root)
	if err != nil {
		return fmt.Errorf("reading btrfs root %s: %w", b.root, err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), tmpPrefix) {
			if err := b.removeTree(ctx, filepath.Join(b.root, e.Name())); err != nil {
				return fmt.Errorf("removing leftover %s: %w", e.Name(), err)
			}
		}
	}
	return nil
}

// path returns where sandboxd's volume name lives, after checking the name.
func (b *Backend) path(name string) (string, error) {
	if err := cowfs.ValidateName(name); err != nil {
		return "", err
	}
	return filepath.Join(b.root, name), nil
}

func (b *Backend) volume(name, path string, kind cowfs.Kind, ours bool) (cowfs.Volume, error) {
	v := cowfs.Volume{Name: name, ID: path, Path: path, Kind: kind, Ours: ours}
	fs, err := dbtrfs.Open(path, true)
	if err != nil {
		return v, fmt.Errorf("opening subvolume %s: %w", path, notFound(err))
	}
	defer fs.Close()
	ro, err := dbtrfs.IsReadOnly(path)
	if err != nil {
		return v, fmt.Errorf("reading flags of subvolume %s: %w", path, err)
	}
	if ours {
		v.Kind = cowfs.KindWritable
		if ro {
			v.Kind = cowfs.KindReadOnly
		}
	}
	if si, err := fs.SubvolumeByPath(path); err == nil {
		v.Created = si.OTime
	}
	return v, nil
}

func (b *Backend) Project(ctx context.Context, location string) (cowfs.Volume, error) {
	if !filepath.IsAbs(location) {
		return cowfs.Volume{}, fmt.Errorf("opening project %q: not an absolute path: %w", location, cowfs.ErrInvalidName)
	}
	path := filepath.Clean(location)
	if _, err := os.Stat(path); err != nil {
		return cowfs.Volume{}, fmt.Errorf("opening project %s: %w", path, notFound(err))
	}
	if err := checkBtrfs(path); err != nil {
		return cowfs.Volume{}, fmt.Errorf("opening project: %w", err)
	}
	if ok, err := dbtrfs.IsSubVolume(path); err != nil {
		return cowfs.Volume{}, fmt.Errorf("opening project %s: %w", path, err)
	} else if !ok {
		return cowfs.Volume{}, fmt.Errorf("opening project %s: a directory, not a btrfs subvolume: %w", path, cowfs.ErrNotVolume)
	}
	if id, err := fsid(path); err != nil {
		return cowfs.Volume{}, fmt.Errorf("opening project %s: %w", path, err)
	} else if id != b.fsid {
		return cowfs.Volume{}, fmt.Errorf("opening project %s: on btrfs filesystem %s, but the pool's root %s is on %s: %w", path, id, b.root, b.fsid, cowfs.ErrOutsidePool)
	}
	if filepath.Dir(path) == b.root {
		return cowfs.Volume{}, fmt.Errorf("opening project %s: it is a volume of sandboxd's, under its root: %w", path, cowfs.ErrInvalidName)
	}
	return b.volume(location, path, cowfs.KindProject, false)
}

func (b *Backend) Create(ctx context.Context, name string) (cowfs.Volume, error) {
	path, err := b.path(name)
	if err != nil {
		return cowfs.Volume{}, fmt.Errorf("creating volume: %w", err)
	}
	if err := b.absent(name, path); err != nil {
		return cowfs.Volume{}, fmt.Errorf("creating volume: %w", err)
	}
	if err := dbtrfs.CreateSubVolume(path); err != nil {
		return cowfs.Volume{}, fmt.Errorf("creating volume %s: %w", name, classify(err))
	}
	return b.volume(name, path, cowfs.KindWritable, true)
}

// absent says ErrExists if anything is at path.
func (b *Backend) absent(name, path string) error {
	if _, err := os.Lstat(path); err == nil {
		return fmt.Errorf("volume %s: %w", name, cowfs.ErrExists)
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("volume %s: %w", name, err)
	}
	return nil
}

func (b *Backend) Snapshot(ctx context.Context, src cowfs.Volume, name string, readOnly bool) (cowfs.Volume, error) {
	path, err := b.path(name)
	if err != nil {
		return cowfs.Volume{}, fmt.Errorf("snapshotting %s: %w", src.Name, err)
	}
	if err := b.absent(name, path); err != nil {
		return cowfs.Volume{}, fmt.Errorf("snapshotting %s: %w", src.Name, err)
	}
	if err := dbtrfs.SnapshotSubVolume(src.ID, path, readOnly); err != nil {
		// A failed snapshot ioctl makes nothing; a stray directory from a
		// failure after it would be a subvolume, so remove what is there.
		if _, statErr := os.Lstat(path); statErr == nil {
			_ = b.removeTree(ctx, path)
		}
		return cowfs.Volume{}, fmt.Errorf("snapshotting %s as %s: %w", src.Name, name, classify(err))
	}
	v, err := b.volume(name, path, cowfs.KindWritable, true)
	v.Origin = src.ID
	return v, err
}

func (b *Backend) Get(ctx context.Context, name string) (cowfs.Volume, error) {
	path, err := b.path(name)
	if err != nil {
		return cowfs.Volume{}, err
	}
	if ok, err := dbtrfs.IsSubVolume(path); err != nil {
		return cowfs.Volume{}, fmt.Errorf("volume %s: %w", name, notFound(err))
	} else if !ok {
		return cowfs.Volume{}, fmt.Errorf("volume %s: %s is not a subvolume: %w", name, path, cowfs.ErrNotVolume)
	}
	return b.volume(name, path, cowfs.KindWritable, true)
}

func (b *Backend) List(ctx context.Context) ([]cowfs.Volume, error) {
	entries, err := os.ReadDir(b.root)
	if err != nil {
		return nil, fmt.Errorf("listing volumes in %s: %w", b.root, err)
	}
	var vols []cowfs.Volume
	for _, e := range entries {
		if !e.IsDir() || cowfs.ValidateName(e.Name()) != nil {
			continue
		}
		path := filepath.Join(b.root, e.Name())
		if ok, err := dbtrfs.IsSubVolume(path); err != nil || !ok {
			continue
		}
		v, err := b.volume(e.Name(), path, cowfs.KindWritable, true)
		if errors.Is(err, cowfs.ErrNotFound) {
			continue // deleted while we listed
		}
		if err != nil {
			return nil, err
		}
		vols = append(vols, v)
	}
	return vols, nil
}

// ours checks that v is one of sandboxd's volumes, directly under the root.
func (b *Backend) ours(v cowfs.Volume, doing string) error {
	if !v.Ours || filepath.Dir(v.ID) != b.root {
		return fmt.Errorf("%s %s: %w", doing, v.Name, cowfs.ErrNotOurs)
	}
	return nil
}

func (b *Backend) Delete(ctx context.Context, v cowfs.Volume) error {
	if err := b.ours(v, "deleting"); err != nil {
		return err
	}
	if _, err := os.Lstat(v.ID); err != nil {
		return fmt.Errorf("deleting %s: %w", v.Name, notFound(err))
	}
	// Rename first: a crash mid-way leaves a leftover that Open removes,
	// never a half-deleted volume under its own name.
	tmp := filepath.Join(b.root, tmpPrefix+"del-"+v.Name)
	if err := os.Rename(v.ID, tmp); err != nil {
		return fmt.Errorf("deleting %s: %w", v.Name, classify(err))
	}
	if err := b.removeTree(ctx, tmp); err != nil {
		return fmt.Errorf("deleting %s: %w", v.Name, err)
	}
	return nil
}

// removeTree deletes the subvolume (or plain directory) at path, with any
// subvolumes nested in it (a sandbox may have made some).
func (b *Backend) removeTree(ctx context.Context, path string) error {
	isSub, err := dbtrfs.IsSubVolume(path)
	if err != nil {
		return notFound(err)
	}
	if isSub {
		// Read-only snapshots cannot lose entries, so nested subvolumes can
		// only be in writable ones; try the fast way first.
		err := dbtrfs.DeleteSubVolume(path)
		if err == nil {
			return nil
		}
		if !errors.Is(err, syscall.ENOTEMPTY) {
			return classify(err)
		}
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return err
		}
		child := filepath.Join(path, e.Name())
		if e.IsDir() {
			if err := b.removeTree(ctx, child); err != nil {
				return err
			}
		} else if !isSub {
			if err := os.Remove(child); err != nil {
				return err
			}
		}
	}
	if isSub {
		return classify(dbtrfs.DeleteSubVolume(path))
	}
	return os.Remove(path)
}

func (b *Backend) Rollback(ctx context.Context, v, to cowfs.Volume) error {
	if err := b.ours(v, "rolling back"); err != nil {
		return err
	}
	if v.Kind != cowfs.KindWritable {
		return fmt.Errorf("rolling back %s: only a writable volume can be rolled back: %w", v.Name, cowfs.ErrReadOnly)
	}
	if to.Kind != cowfs.KindReadOnly {
		return fmt.Errorf("rolling back %s to %s: the target must be a read-only snapshot: %w", v.Name, to.Name, cowfs.ErrInvalidName)
	}
	return b.swapIn(ctx, v, to, "rb-"+v.Name)
}

func (b *Backend) RollbackProject(ctx context.Context, project, to cowfs.Volume) error {
	if project.Kind != cowfs.KindProject {
		return fmt.Errorf("rolling back project %s: not a project: %w", project.Name, cowfs.ErrInvalidName)
	}
	if to.Kind != cowfs.KindReadOnly || !to.Ours {
		return fmt.Errorf("rolling back project %s to %s: the target must be a read-only snapshot of sandboxd's: %w", project.Name, to.Name, cowfs.ErrInvalidName)
	}
	// The same swap as Rollback: the project's path is a subvolume of the
	// pool's filesystem (Project checked), so it can be exchanged.
	return b.swapIn(ctx, project, to, "rbp-"+to.Name)
}

// swapIn makes v's path hold a writable snapshot of to, in one atomic
// rename: after a crash, v's path holds either the old or the new tree.
// The old tree goes after, under tmp.
func (b *Backend) swapIn(ctx context.Context, v, to cowfs.Volume, tmp string) error {
	tmp = filepath.Join(b.root, tmpPrefix+tmp)
	if err := dbtrfs.SnapshotSubVolume(to.ID, tmp, false); err != nil {
		return fmt.Errorf("rolling back %s to %s: %w", v.Name, to.Name, classify(err))
	}
	if err := unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, v.ID, unix.RENAME_EXCHANGE); err != nil {
		_ = b.removeTree(ctx, tmp)
		if errors.Is(err, unix.EBUSY) || errors.Is(err, unix.EXDEV) {
			return fmt.Errorf("rolling back %s to %s: %s is a mount point of its own, which cannot be swapped: %w", v.Name, to.Name, v.ID, cowfs.ErrBusy)
		}
		return fmt.Errorf("rolling back %s to %s: swapping: %w", v.Name, to.Name, classify(err))
	}
	if err := b.removeTree(ctx, tmp); err != nil {
		return fmt.Errorf("rolling back %s: removing the old tree: %w", v.Name, err)
	}
	return nil
}

func (b *Backend) ChangedSince(ctx context.Context, v, since cowfs.Volume) (bool, error) {
	gv, err := b.generation(v)
	if err != nil {
		return false, err
	}
	gs, err := b.generation(since)
	if err != nil {
		return false, err
	}
	return gv > gs, nil
}

// generation is the subvolume's ctransid: the transaction of its last
// change, copied into a snapshot when it is taken.
func (b *Backend) generation(v cowfs.Volume) (uint64, error) {
	fs, err := dbtrfs.Open(v.ID, true)
	if err != nil {
		return 0, fmt.Errorf("reading the generation of %s: %w", v.Name, notFound(err))
	}
	defer fs.Close()
	si, err := fs.SubvolumeByPath(v.ID)
	if err != nil {
		return 0, fmt.Errorf("reading the generation of %s: %w", v.Name, err)
	}
	return si.CTransID, nil
}

func (b *Backend) Changes(ctx context.Context, from, to cowfs.Volume) ([]cowfs.Change, error) {
	if !from.ReadOnly() || !to.ReadOnly() {
		return nil, fmt.Errorf("listing changes from %s to %s: btrfs sends only read-only snapshots: %w", from.Name, to.Name, cowfs.ErrReadOnly)
	}
	parentFS, err := dbtrfs.Open(from.ID, true)
	if err != nil {
		return nil, fmt.Errorf("listing changes from %s: %w", from.Name, notFound(err))
	}
	parentID, err := parentFS.SubVolumeID()
	parentFS.Close()
	if err != nil {
		return nil, fmt.Errorf("listing changes from %s: %w", from.Name, err)
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	sent := make(chan error, 1)
	go func() {
		sent <- sendNoData(to.ID, parentID, pw)
		pw.Close()
	}()
	stop := context.AfterFunc(ctx, func() { pr.Close() }) // ends the send with EPIPE
	defer stop()
	// Reads of the sandbox's files from the host (a backup, rsync, a
	// find) move access times, which the stream sends as utimes: the
	// base's times tell those from real changes.
	changes, parseErr := sendstream.ChangesWith(pr, sendstream.Options{BaseTimes: baseTimes(from.Path)})
	pr.Close()
	if err := <-sent; err != nil {
		return nil, fmt.Errorf("listing changes from %s to %s: %w", from.Name, to.Name, errors.Join(ctx.Err(), classify(err)))
	}
	if parseErr != nil {
		return nil, fmt.Errorf("listing changes from %s to %s: %w", from.Name, to.Name, parseErr)
	}
	// The stream names the type of what it creates; for the rest (unlink,
	// rename, chmod of existing entries) the snapshots tell.
	for i, c := range changes {
		if c.Type != cowfs.TypeUnknown {
			continue
		}
		where := filepath.Join(from.Path, c.Path)
		if c.Kind == cowfs.Added {
			where = filepath.Join(to.Path, c.Path)
		}
		if fi, err := os.Lstat(where); err == nil {
			changes[i].Type = cowfs.TypeOf(fi.Mode())
		}
	}
	return changes, nil
}

func (b *Backend) Send(ctx context.Context, w io.Writer, from *cowfs.Volume, to cowfs.Volume) error {
	if !to.ReadOnly() || from != nil && !from.ReadOnly() {
		return fmt.Errorf("sending %s: btrfs sends only read-only snapshots: %w", to.Name, cowfs.ErrReadOnly)
	}
	parent := ""
	if from != nil {
		parent = from.ID
	}
	if err := dbtrfs.Send(w, parent, to.ID); err != nil {
		return fmt.Errorf("sending %s: %w", to.Name, classify(err))
	}
	return nil
}

// Receive runs `btrfs receive` into a temporary directory while our own
// parser checks the stream on the way, then renames the one subvolume it
// made into place. A stream that is corrupt, a full pool, or anything else
// that fails leaves nothing behind.
func (b *Backend) Receive(ctx context.Context, r io.Reader, name string) (v cowfs.Volume, err error) {
	path, err := b.path(name)
	if err != nil {
		return v, fmt.Errorf("receiving: %w", err)
	}
	if err := b.absent(name, path); err != nil {
		return v, fmt.Errorf("receiving: %w", err)
	}
	staging := filepath.Join(b.root, tmpPrefix+"recv-"+name)
	if err := os.Mkdir(staging, 0o700); err != nil {
		return v, fmt.Errorf("receiving %s: %w", name, classify(err))
	}
	defer func() {
		if rmErr := b.removeTree(context.WithoutCancel(ctx), staging); rmErr != nil && err == nil {
			err = fmt.Errorf("receiving %s: cleaning up: %w", name, rmErr)
		}
	}()

	pr, pw := io.Pipe()
	checked := make(chan error, 1)
	go func() {
		checked <- sendstream.Check(pr)
		_, _ = io.Copy(io.Discard, pr)
	}()
	_, runErr := command.Run(ctx, command.Cmd{
		Argv:  []string{"btrfs", "receive", "-e", staging},
		Stdin: io.TeeReader(r, pw),
	})
	pw.Close()
	streamErr := <-checked
	runErr = classify(runErr)
	switch {
	case errors.Is(runErr, cowfs.ErrNoSpace) || errors.Is(runErr, cowfs.ErrQuotaExceeded):
		return v, fmt.Errorf("receiving %s: %w", name, runErr)
	case streamErr != nil:
		return v, fmt.Errorf("receiving %s: %w", name, streamErr)
	case runErr != nil:
		return v, fmt.Errorf("receiving %s: %w", name, runErr)
	}
	entries, err := os.ReadDir(staging)
	if err != nil || len(entries) != 1 {
		return v, fmt.Errorf("receiving %s: the stream made %d subvolumes, want 1: %w", name, len(entries), cowfs.ErrCorruptStream)
	}
	// btrfs will not move a read-only subvolume to another directory; a
	// read-only snapshot of it in place costs the same.
	if err := dbtrfs.SnapshotSubVolume(filepath.Join(staging, entries[0].Name()), path, true); err != nil {
		return v, fmt.Errorf("receiving %s: %w", name, classify(err))
	}
	return b.volume(name, path, cowfs.KindReadOnly, true)
}

// ensureQuota turns quotas on for the filesystem once: simple quotas where
// the kernel has them, full qgroups otherwise.
func (b *Backend) ensureQuota() error {
	b.quotaOnce.Do(func() {
		if mode := b.quotaMode(); mode != "" {
			return
		}
		err := quotaCtl(b.mount, quotaCtlEnableSimple)
		if errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.EOPNOTSUPP) {
			err = quotaCtl(b.mount, quotaCtlEnable)
		}
		if err != nil {
			b.quotaErr = fmt.Errorf("enabling quotas on %s: %w", b.mount, err)
		}
	})
	return b.quotaErr
}

// quotaMode reads the quota mode from sysfs: "simple", "qgroup", or ""
// when quotas are off.
func (b *Backend) quotaMode() string {
	dir := filepath.Join("/sys/fs/btrfs", b.fsid, "qgroups")
	if _, err := os.Stat(dir); err != nil {
		return ""
	}
	data, err := os.ReadFile(filepath.Join(dir, "mode"))
	if err != nil {
		return "qgroup" // kernels before 6.7 have no mode file
	}
	return strings.TrimSpace(string(data))
}

func (b *Backend) SetQuota(ctx context.Context, v cowfs.Volume, bytes uint64) error {
	if err := b.ours(v, "setting the quota of"); err != nil {
		return err
	}
	if err := b.ensureQuota(); err != nil {
		return fmt.Errorf("setting the quota of %s: %w", v.Name, err)
	}
	limit := "none"
	if bytes > 0 {
		limit = strconv.FormatUint(bytes, 10)
	}
	// btrfs-progs 6.2 sets limits on simple quotas fine; only enabling
	// them needs the ioctl.
	if _, err := command.Output(ctx, "btrfs", "qgroup", "limit", "-e", limit, v.ID); err != nil {
		return fmt.Errorf("setting the quota of %s: %w", v.Name, classify(err))
	}
	return nil
}

func (b *Backend) Usage(ctx context.Context, v cowfs.Volume) (cowfs.Usage, error) {
	if b.quotaMode() == "" {
		return cowfs.Usage{}, fmt.Errorf("reading the usage of %s: quotas are off on %s (they turn on with the first quota set): %w", v.Name, b.mount, cowfs.ErrUnsupported)
	}
	fs, err := dbtrfs.Open(v.ID, true)
	if err != nil {
		return cowfs.Usage{}, fmt.Errorf("reading the usage of %s: %w", v.Name, notFound(err))
	}
	id, err := fs.SubVolumeID()
	fs.Close()
	if err != nil {
		return cowfs.Usage{}, fmt.Errorf("reading the usage of %s: %w", v.Name, err)
	}
	dir := filepath.Join("/sys/fs/btrfs", b.fsid, "qgroups", fmt.Sprintf("0_%d", id))
	read := func(file string) (uint64, error) {
		data, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			return 0, fmt.Errorf("reading the usage of %s: %w", v.Name, err)
		}
		s := strings.TrimSpace(string(data))
		if s == "none" {
			return 0, nil
		}
		return strconv.ParseUint(s, 10, 64)
	}
	var u cowfs.Usage
	if u.Exclusive, err = read("exclusive"); err != nil {
		return u, err
	}
	if u.Referenced, err = read("referenced"); err != nil {
		return u, err
	}
	if u.Quota, err = read("max_exclusive"); err != nil {
		return u, err
	}
	return u, nil
}

// notFound turns "no such file" into ErrNotFound, keeping the cause.
func notFound(err error) error {
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%w: %w", cowfs.ErrNotFound, err)
	}
	return err
}

// classify maps errno values and btrfs tools' messages to the sentinels.
func classify(err error) error {
	if err == nil {
		return nil
	}
	stderr := command.Stderr(err)
	switch {
	case errors.Is(err, syscall.ENOSPC) || strings.Contains(stderr, "No space left"):
		return fmt.Errorf("%w: %w", cowfs.ErrNoSpace, err)
	case errors.Is(err, syscall.EDQUOT) || strings.Contains(stderr, "Disk quota exceeded"):
		return fmt.Errorf("%w: %w", cowfs.ErrQuotaExceeded, err)
	case errors.Is(err, syscall.EEXIST):
		return fmt.Errorf("%w: %w", cowfs.ErrExists, err)
	case errors.Is(err, syscall.EBUSY):
		return fmt.Errorf("%w: %w", cowfs.ErrBusy, err)
	case errors.Is(err, syscall.EXDEV):
		return fmt.Errorf("%w: %w", cowfs.ErrOutsidePool, err)
	case errors.Is(err, syscall.EROFS):
		return fmt.Errorf("%w: %w", cowfs.ErrReadOnly, err)
	case strings.Contains(stderr, "crc32 mismatch") || strings.Contains(stderr, "invalid command") ||
		strings.Contains(stderr, "short read") || strings.Contains(stderr, "unexpected EOF") ||
		strings.Contains(stderr, "Unsupported version") || strings.Contains(stderr, "invalid header"):
		return fmt.Errorf("%w: %w", cowfs.ErrCorruptStream, err)
	}
	return notFound(err)
}

// baseTimes reads the modification and change times of a path below root,
// through no symlink (the tree is a sandbox's).
func baseTimes(root string) func(path string) (time.Time, time.Time, bool) {
	return func(path string) (time.Time, time.Time, bool) {
		rootFD, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return time.Time{}, time.Time{}, false
		}
		defer unix.Close(rootFD)
		if path == "." || path == "" {
			path = "."
		}
		fd, err := unix.Openat2(rootFD, path, &unix.OpenHow{
			Flags:   uint64(unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC),
			Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
		})
		if err != nil {
			return time.Time{}, time.Time{}, false
		}
		defer unix.Close(fd)
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return time.Time{}, time.Time{}, false
		}
		return time.Unix(st.Mtim.Unix()), time.Unix(st.Ctim.Unix()), true
	}
}
