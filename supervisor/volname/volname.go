// Package volname names what sandboxd makes (volumes, scopes, check
// sandboxes) so that the filesystem and systemd alone tell what is whose,
// and deletes such a volume.
package volname

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/sandboxd/sandboxd/cowfs"
)

// The names of what sandboxd makes start with these prefixes, so that the
// filesystem and systemd alone tell what is whose: Reconcile reads a
// volume's or a scope's owner from its name, and removes what no record
// names. A name is PREFIX + an id (12 hex digits) + what follows. Volume
// names must stay within cowfs.MaxNameLen. (The btrfs backend's own
// temporary entries start with ".tmp-": cowfs/btrfs keeps that prefix.)
const (
	// PrefixSandbox: a sandbox's writable copy of its project, sb-ID (a
	// rebase makes sb-ID-N before the record names it).
	PrefixSandbox = "sb-"
	// PrefixBase: the read-only snapshot of the project a sandbox was made
	// of, base-ID (base-ID-N after a rebase).
	PrefixBase = "base-"
	// PrefixLayer: a sandbox's system layer (the overlay's upper
	// directory over the host's root), sys-ID, where it is a volume.
	PrefixLayer = "sys-"
	// PrefixCheckpoint: checkpoint NAME of sandbox ID's copy of the
	// project, ck-ID-NAME.
	PrefixCheckpoint = "ck-"
	// PrefixCheckpointLayer: the same checkpoint of its system layer,
	// cks-ID-NAME.
	PrefixCheckpointLayer = "cks-"
	// PrefixDiff: a short-lived read-only snapshot taken to list a
	// sandbox's or a project's changes (Diff, Rebase), diff-ID-X.
	PrefixDiff = "diff-"
	// PrefixPromotion: a promotion's volumes, pv-PID-src (the sandbox's
	// source snapshot, what is promoted), pv-PID-rpN (stage N's rollback
	// point, the project before the stage) and pv-PID-out (the promoted
	// project, which replica stages receive).
	PrefixPromotion = "pv-"
	// PrefixCheckSandbox names the sandbox a promotion's checks run in,
	// check-PID (a sandbox name, not a volume's).
	PrefixCheckSandbox = "check-"
	// PrefixUnit: a sandbox's transient systemd scope, sandbox-ID.scope;
	// also its hostname, sandbox-ID.
	PrefixUnit = "sandbox-"

	// PrefixCache: an owner's cache volume, cache-uUID (a uid, not a
	// sandbox's id: it outlives the owner's sandboxes, and Reconcile,
	// which removes only what a sandbox's or a promotion's prefix names,
	// keeps it). Every sandbox of that owner mounts it (supervisor/caches).
	PrefixCache = "cache-u"
	// PrefixCacheFS: an owner's cache as a filesystem of its own, on a
	// pool where copies into a volume escape its quota (supervisor/caches):
	// cachefs-uUID holds the image and its mount point, root's alone.
	PrefixCacheFS = "cachefs-u"

	// PrefixRollbackMarker: the empty volume that says a rollback of a
	// sandbox to a checkpoint is under way ("rollback-<id>-<checkpoint>").
	PrefixRollbackMarker = "rollback-"
)

// Checkpoint and CheckpointLayer are the volumes of checkpoint
// name of sandbox id: its project copy's and its system layer's.
func Checkpoint(id, name string) string      { return PrefixCheckpoint + id + "-" + name }
func CheckpointLayer(id, name string) string { return PrefixCheckpointLayer + id + "-" + name }

// CheckpointOf tells a checkpoint's (or diff's) volume name's sandbox id,
// for Reconcile: ck-ID-NAME, cks-ID-NAME, diff-ID-X.
func CheckpointOf(volume string) (id, name string, ok bool) {
	for _, prefix := range []string{PrefixCheckpointLayer, PrefixCheckpoint, PrefixDiff} {
		if rest, found := strings.CutPrefix(volume, prefix); found {
			id, name, ok = strings.Cut(rest, "-")
			if prefix == PrefixDiff {
				name = ""
			}
			return id, name, ok
		}
	}
	return "", "", false
}

// RollbackMarker is the volume that says a rollback of sandbox id to
// its checkpoint name is under way; RollbackOf reads it back.
func RollbackMarker(id, name string) string { return PrefixRollbackMarker + id + "-" + name }

func RollbackOf(volume string) (id, name string, ok bool) {
	rest, found := strings.CutPrefix(volume, PrefixRollbackMarker)
	if !found {
		return "", "", false
	}
	return strings.Cut(rest, "-")
}

// Diff is a short-lived read-only snapshot of sandbox id's (tag
// tells which, and makes it unique), taken to list changes.
func Diff(id, tag string) string { return PrefixDiff + id + "-" + tag }

// Rebase are the base and the copy a rebase of sandbox id makes,
// generation gen, before its record names them.
func Rebase(id, gen string) (base, volume string) {
	return Base(id) + "-" + gen, Sandbox(id) + "-" + gen
}

// Delete deletes sandboxd's volume name of b if it exists.
func Delete(ctx context.Context, b cowfs.Backend, name string) error {
	v, err := b.Get(ctx, name)
	if errors.Is(err, cowfs.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := b.Delete(ctx, v); err != nil && !errors.Is(err, cowfs.ErrNotFound) {
		return err
	}
	return nil
}

// Names of a promotion's volumes: the sandbox's source snapshot, each
// stage's rollback point, and the promoted project's snapshot that the
// replica stages receive. Reconcile removes those of finished promotions.
func promotionPrefix(pid string) string { return PrefixPromotion + pid + "-" }
func PromotionSource(pid string) string { return promotionPrefix(pid) + "src" }
func PromotionRollback(pid string, stage int) string {
	return fmt.Sprintf("%srp%d", promotionPrefix(pid), stage)
}
func PromotionOut(pid string) string { return promotionPrefix(pid) + "out" }

// PromotionCheckSandbox is the name of the sandbox a promotion's
// checks run in.
func PromotionCheckSandbox(pid string) string { return PrefixCheckSandbox + pid }

// PromotionOf tells a promotion volume's promotion id.
func PromotionOf(volume string) (string, bool) {
	rest, ok := strings.CutPrefix(volume, PrefixPromotion)
	if !ok {
		return "", false
	}
	pid, _, ok := strings.Cut(rest, "-")
	return pid, ok
}

// Names of a sandbox's parts, derived from its id.
func Base(id string) string    { return PrefixBase + id }
func Sandbox(id string) string { return PrefixSandbox + id }
func Unit(id string) string    { return PrefixUnit + id + ".scope" }
func Layer(id string) string   { return PrefixLayer + id }
