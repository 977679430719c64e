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
	"os"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/cowfs"
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
	// groupMu: a group's making and its first member are not split by
	// the removal of groups without members (group.go).
	groupMu sync.Mutex
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
			GroupQuota:           true,
			CloneAcrossVolumes:   true,
			OverlayUpper:         true,
			Idmap:                kernelAtLeast(kernel, 5, 15),
		},
	}
	if err := b.removeLeftovers(ctx); err != nil {
		return nil, err
	}
	// Groups a crash left without members: left, they cost a qgroup item
	// each and bound nothing, so a failure to sweep them does not stop
	// the pool from opening.
	_ = b.sweepGroups()
	return b, nil
}

func (b *Backend) Info() cowfs.Info { return b.info }

func (b *Backend) Close() error { return nil }

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
