// Package zfs is the cowfs backend for ZFS, on OpenZFS and on zfs-fuse
// (pool version 23, the testbed's).
//
// Every volume of sandboxd's is a dataset directly under the root dataset,
// so that each has files to look at (zfs-fuse shows no .zfs directory):
//
//   - a writable volume N is the dataset ROOT/N, empty or a clone;
//   - a read-only volume N is the snapshot SRC@N (its ID: what sends,
//     rollbacks and clones use) and a read-only clone ROOT/N (its files).
//
// What a clone still needs when its origin volume is deleted is held,
// marked org.sandboxd:held=yes, until the clone goes (held.go).
//
// All of them, snapshots included, carry the user property
// org.sandboxd:managed=yes set locally, which is how a reconcile tells
// sandboxd's from the user's.
//
// github.com/mistifyio/go-zfs does the sends, destroys, properties and
// rollbacks. Its Snapshot, Clone, ReceiveSnapshot and listings end with
// `zfs list -p`, which zfs-fuse lacks: those go through our exec wrapper
// with portable flags.
package zfs

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/cowfs/internal/command"
)

const (
	propManaged = "org.sandboxd:managed"
	propKind    = "org.sandboxd:kind"
	// tmpMark is in every temporary dataset name: ZFS allows ':' in names,
	// volume names do not, so they never collide.
	tmpMark = ":"
)

// Backend is a ZFS pool rooted at a dataset.
type Backend struct {
	root string // the root dataset, e.g. tank/sandboxd
	pool string
	info cowfs.Info
}

var _ cowfs.Backend = (*Backend)(nil)

// Open opens (making it if needed) the root dataset. A missing pool is
// ErrNotFound, naming it.
func Open(ctx context.Context, root string) (*Backend, error) {
	if err := cowfs.ValidateDataset(root); err != nil {
		return nil, fmt.Errorf("opening zfs root: %w", err)
	}
	pool, _, _ := strings.Cut(root, "/")
	if _, err := command.Output(ctx, "zpool", "list", "-H", "-o", "name", pool); err != nil {
		return nil, fmt.Errorf("opening zfs root %s: pool %s: %w", root, pool, classify(err))
	}
	b := &Backend{root: root, pool: pool}
	if _, err := command.Output(ctx, "zfs", "list", "-H", "-o", "name", root); err != nil {
		if !errors.Is(classify(err), cowfs.ErrNotFound) {
			return nil, fmt.Errorf("opening zfs root %s: %w", root, classify(err))
		}
		if _, err := command.Output(ctx, "zfs", "create", "-p", "-o", propManaged+"=yes", root); err != nil {
			return nil, fmt.Errorf("making zfs root %s: %w", root, classify(err))
		}
	}
	b.info = cowfs.Info{Backend: "zfs", Root: root, Version: version(ctx, pool)}
	caps := &b.info.Capabilities
	caps.Quota = true
	caps.SeparateMounts = true
	// zfs-fuse answers "unrecognized command" to what it lacks.
	_, err := command.Output(ctx, "zfs", "diff")
	caps.FastChanges = err == nil || !strings.Contains(command.Stderr(err), "unrecognized command")
	_, err = command.Output(ctx, "zfs", "get", "-H", "-o", "value", "written", root)
	caps.Generation = err == nil
	caps.OverlayUpper = overlayUpper(b.info.Version)
	// zfs-fuse never idmaps (its FUSE server does not set
	// FUSE_ALLOW_IDMAP). OpenZFS does from 2.2, but is untried here, and
	// its datasets are mounted where host users may reach a set-id file
	// a sandbox's root made (setuid=on, 0755 mountpoints): not claimed.
	caps.Idmap = false
	if err := b.removeLeftovers(ctx); err != nil {
		return nil, err
	}
	return b, nil
}

func (b *Backend) Info() cowfs.Info { return b.info }

func (b *Backend) Close() error { return nil }

// removeLeftovers destroys the temporary datasets a crash left under the
// root (their names hold ':'), and what was held that nothing needs.
func (b *Backend) removeLeftovers(ctx context.Context) error {
	lines, err := command.Lines(ctx, "zfs", "list", "-H", "-r", "-d", "1", "-t", "filesystem", "-o", "name", b.root)
	if err != nil {
		return fmt.Errorf("listing %s: %w", b.root, classify(err))
	}
	for _, f := range lines {
		if strings.Contains(path.Base(f[0]), tmpMark) {
			if err := b.destroy(ctx, f[0], "-r"); err != nil {
				return fmt.Errorf("removing leftover %s: %w", f[0], err)
			}
		}
	}
	return b.removeHeld(ctx)
}
