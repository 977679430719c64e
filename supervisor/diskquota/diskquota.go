// Package diskquota bounds what a sandbox writes in all: its project's
// volume, its system layer (/usr, /opt, /etc, ...) and its checkpoints
// together. Where the pool has group quotas (btrfs) they share one bound,
// a quota group named by the sandbox's id, removed with the sandbox.
// Elsewhere (ZFS) the bound is split: the volume and the layer (a volume
// or a tmpfs) get half each, so that together they never hold more. A
// lower part of the core: it knows nothing of it.
package diskquota

import (
	"context"
	"fmt"
	"log/slog"
	"slices"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/supervisor/state"
)

// Bound puts sandbox rec's volumes vols under its disk quota: into
// its group, or each writable one to its share. A zero Volume (a layer
// that is a tmpfs) is skipped.
func Bound(ctx context.Context, b cowfs.Backend, rec state.Record, vols ...cowfs.Volume) error {
	vols = slices.DeleteFunc(slices.Clone(vols), func(v cowfs.Volume) bool { return v.Name == "" })
	if rec.DiskQuota == 0 || len(vols) == 0 {
		return nil
	}
	if b.Info().Capabilities.GroupQuota {
		if err := b.GroupQuota(ctx, rec.ID, rec.DiskQuota, vols...); err != nil {
			return fmt.Errorf("bounding the disk of sandbox %s: %w", rec.ID, err)
		}
		return nil
	}
	for _, v := range vols {
		if v.ReadOnly() {
			continue // a ZFS snapshot counts in its dataset's quota
		}
		if err := b.SetQuota(ctx, v, Share(rec.DiskQuota)); err != nil {
			return fmt.Errorf("bounding the disk of sandbox %s: %w", rec.ID, err)
		}
	}
	return nil
}

// joiner is a backend whose quota groups take in another group's
// members (btrfs).
type joiner interface {
	JoinGroup(ctx context.Context, to, from string) error
}

// Inherit counts in fork rec's group what it holds of its source src's
// writes: the members of src's group (its volumes, its checkpoints', and
// those of the sandboxes src was forked from, deleted but still holding
// what they wrote). Without it a snapshot owns nothing under simple
// quotas, and a chain of fork and destroy would hold any amount under one
// bound. What src writes after the fork counts in the fork's bound too,
// while src lives: a fork's bound never counts less than it holds.
func Inherit(ctx context.Context, b cowfs.Backend, rec, src state.Record) error {
	j, ok := b.(joiner)
	if rec.DiskQuota == 0 || src.DiskQuota == 0 || !ok || !b.Info().Capabilities.GroupQuota {
		return nil
	}
	if err := j.JoinGroup(ctx, rec.ID, src.ID); err != nil {
		return fmt.Errorf("bounding the disk of fork %s of sandbox %s: %w", rec.ID, src.ID, err)
	}
	return nil
}

// Share is the part of a split disk quota each of the volume and the
// layer gets.
func Share(quota uint64) uint64 { return quota / 2 }

// Unbound removes sandbox rec's quota group, if it has one. A group
// left (logged) bounds volumes that are deleted next; the backend removes
// groups without members when it opens.
func Unbound(ctx context.Context, b cowfs.Backend, log *slog.Logger, rec state.Record) {
	if rec.DiskQuota == 0 || !b.Info().Capabilities.GroupQuota {
		return
	}
	if err := b.GroupQuota(ctx, rec.ID, 0); err != nil {
		log.Warn("removing a sandbox's quota group", "SANDBOX_ID", rec.ID, "error", err)
	}
}
