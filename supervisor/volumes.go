package supervisor

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
	// prefixSandbox: a sandbox's writable copy of its project, sb-ID (a
	// rebase makes sb-ID-N before the record names it).
	prefixSandbox = "sb-"
	// prefixBase: the read-only snapshot of the project a sandbox was made
	// of, base-ID (base-ID-N after a rebase).
	prefixBase = "base-"
	// prefixLayer: a sandbox's system layer (the overlay's upper
	// directory over the host's root), sys-ID, where it is a volume.
	prefixLayer = "sys-"
	// prefixCheckpoint: checkpoint NAME of sandbox ID's copy of the
	// project, ck-ID-NAME.
	prefixCheckpoint = "ck-"
	// prefixCheckpointLayer: the same checkpoint of its system layer,
	// cks-ID-NAME.
	prefixCheckpointLayer = "cks-"
	// prefixDiff: a short-lived read-only snapshot taken to list a
	// sandbox's or a project's changes (Diff, Rebase), diff-ID-X.
	prefixDiff = "diff-"
	// prefixPromotion: a promotion's volumes, pv-PID-src (the sandbox's
	// source snapshot, what is promoted), pv-PID-rpN (stage N's rollback
	// point, the project before the stage) and pv-PID-out (the promoted
	// project, which replica stages receive).
	prefixPromotion = "pv-"
	// prefixCheckSandbox names the sandbox a promotion's checks run in,
	// check-PID (a sandbox name, not a volume's).
	prefixCheckSandbox = "check-"
	// prefixUnit: a sandbox's transient systemd scope, sandbox-ID.scope;
	// also its hostname, sandbox-ID.
	prefixUnit = "sandbox-"

	// PrefixCache: an owner's cache volume, cache-uUID (a uid, not a
	// sandbox's id: it outlives the owner's sandboxes, and Reconcile,
	// which removes only what a sandbox's or a promotion's prefix names,
	// keeps it). Every sandbox of that owner mounts it (supervisor/caches).
	PrefixCache = "cache-u"
	// PrefixCacheFS: an owner's cache as a filesystem of its own, on a
	// pool where copies into a volume escape its quota (supervisor/caches):
	// cachefs-uUID holds the image and its mount point, root's alone.
	PrefixCacheFS = "cachefs-u"

	// prefixRollbackMarker: the empty volume that says a rollback of a
	// sandbox to a checkpoint is under way ("rollback-<id>-<checkpoint>").
	prefixRollbackMarker = "rollback-"
)

// CheckpointName and CheckpointLayerName are the volumes of checkpoint
// name of sandbox id: its project copy's and its system layer's.
func CheckpointName(id, name string) string      { return prefixCheckpoint + id + "-" + name }
func CheckpointLayerName(id, name string) string { return prefixCheckpointLayer + id + "-" + name }

// checkpointOf tells a checkpoint's (or diff's) volume name's sandbox id,
// for Reconcile: ck-ID-NAME, cks-ID-NAME, diff-ID-X.
func checkpointOf(volume string) (id, name string, ok bool) {
	for _, prefix := range []string{prefixCheckpointLayer, prefixCheckpoint, prefixDiff} {
		if rest, found := strings.CutPrefix(volume, prefix); found {
			id, name, ok = strings.Cut(rest, "-")
			if prefix == prefixDiff {
				name = ""
			}
			return id, name, ok
		}
	}
	return "", "", false
}

// RollbackMarkerName is the volume that says a rollback of sandbox id to
// its checkpoint name is under way; RollbackOf reads it back.
func RollbackMarkerName(id, name string) string { return prefixRollbackMarker + id + "-" + name }

func RollbackOf(volume string) (id, name string, ok bool) {
	rest, found := strings.CutPrefix(volume, prefixRollbackMarker)
	if !found {
		return "", "", false
	}
	return strings.Cut(rest, "-")
}

// DiffName is a short-lived read-only snapshot of sandbox id's (tag
// tells which, and makes it unique), taken to list changes.
func DiffName(id, tag string) string { return prefixDiff + id + "-" + tag }

// RebaseNames are the base and the copy a rebase of sandbox id makes,
// generation gen, before its record names them.
func RebaseNames(id, gen string) (base, volume string) {
	return baseName(id) + "-" + gen, volumeName(id) + "-" + gen
}

// DeleteVolume deletes sandboxd's volume name of b if it exists.
func DeleteVolume(ctx context.Context, b cowfs.Backend, name string) error {
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
func promotionPrefix(pid string) string     { return prefixPromotion + pid + "-" }
func PromotionSourceName(pid string) string { return promotionPrefix(pid) + "src" }
func PromotionRollbackName(pid string, stage int) string {
	return fmt.Sprintf("%srp%d", promotionPrefix(pid), stage)
}
func PromotionOutName(pid string) string { return promotionPrefix(pid) + "out" }

// PromotionCheckSandboxName is the name of the sandbox a promotion's
// checks run in.
func PromotionCheckSandboxName(pid string) string { return prefixCheckSandbox + pid }

// PromotionOf tells a promotion volume's promotion id.
func PromotionOf(volume string) (string, bool) {
	rest, ok := strings.CutPrefix(volume, prefixPromotion)
	if !ok {
		return "", false
	}
	pid, _, ok := strings.Cut(rest, "-")
	return pid, ok
}
