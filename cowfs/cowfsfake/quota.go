package cowfsfake

import (
	"context"
	"fmt"

	"github.com/sandboxd/sandboxd/cowfs"
)

// SetQuota records the limit, which Usage reports; nothing enforces it
// (Capabilities.Quota is false). It is recorded rather than refused so
// that the supervisor's creates, which bound every sandbox's disk, run.
func (b *Backend) SetQuota(ctx context.Context, v cowfs.Volume, bytes uint64) error {
	if err := b.enter(ctx, "SetQuota", v.Name); err != nil {
		return err
	}
	defer b.mu.Unlock()
	rec, err := b.ours(v, "setting the quota of")
	if err != nil {
		return err
	}
	rec.Quota = bytes
	return b.save()
}

// GroupQuota is not had (Capabilities.GroupQuota is false): callers
// split their bound with SetQuota, as on ZFS.
func (b *Backend) GroupQuota(ctx context.Context, group string, bytes uint64, vols ...cowfs.Volume) error {
	if err := b.enter(ctx, "GroupQuota", group); err != nil {
		return err
	}
	defer b.mu.Unlock()
	if bytes == 0 {
		return nil // never made
	}
	return fmt.Errorf("bounding %d volumes together as %q: the fake has no quota groups: %w", len(vols), group, cowfs.ErrUnsupported)
}

// Usage counts the bytes of v's files: Referenced all of them, Exclusive
// those of files made or written since the volume was (the copy-on-write
// backends' "what this volume alone holds").
func (b *Backend) Usage(ctx context.Context, v cowfs.Volume) (cowfs.Usage, error) {
	if err := b.enter(ctx, "Usage", v.Name); err != nil {
		return cowfs.Usage{}, err
	}
	defer b.mu.Unlock()
	rec, path, err := b.find(v)
	if err != nil {
		return cowfs.Usage{}, fmt.Errorf("reading the usage of %s: %w", v.Name, err)
	}
	tree, err := readTree(ctx, path)
	if err != nil {
		return cowfs.Usage{}, fmt.Errorf("reading the usage of %s: %w", v.Name, err)
	}
	u := cowfs.Usage{Quota: rec.Quota}
	counted := map[string]bool{} // hard links count once
	for _, e := range tree {
		if e.typ != cowfs.TypeFile && e.typ != cowfs.TypeSymlink || counted[e.key] {
			continue
		}
		counted[e.key] = true
		size := uint64(e.size)
		u.Referenced += size
		if f, ok := rec.Files[e.key]; !ok || f.Size != e.size || f.Mtime != e.mtime.Nano() {
			u.Exclusive += size
		}
	}
	return u, nil
}
