package zfs

import (
	"context"
	"fmt"
	"strconv"

	gozfs "github.com/mistifyio/go-zfs/v4"

	"github.com/sandboxd/sandboxd/cowfs"
)

func (b *Backend) SetQuota(ctx context.Context, v cowfs.Volume, bytes uint64) error {
	ds, err := b.ours(v, "setting the quota of")
	if err != nil {
		return err
	}
	// "quota", not "refquota": a clone's "used" counts only what it wrote,
	// its "referenced" counts the whole project it shares.
	limit := "none"
	if bytes > 0 {
		limit = strconv.FormatUint(bytes, 10)
	}
	if err := (&gozfs.Dataset{Name: ds}).SetProperty("quota", limit); err != nil {
		return fmt.Errorf("setting the quota of %s: %w", v.Name, classify(err))
	}
	return nil
}

func (b *Backend) Usage(ctx context.Context, v cowfs.Volume) (cowfs.Usage, error) {
	ds, err := b.dataset(v.Name)
	if err != nil || v.Kind == cowfs.KindProject {
		ds = v.ID
	}
	d := &gozfs.Dataset{Name: ds}
	var u cowfs.Usage
	for _, f := range []struct {
		prop string
		dst  *uint64
	}{{"used", &u.Exclusive}, {"referenced", &u.Referenced}, {"quota", &u.Quota}} {
		s, err := d.GetProperty(f.prop)
		if err != nil {
			return u, fmt.Errorf("reading the usage of %s: %w", v.Name, classify(err))
		}
		if s == "-" || s == "none" {
			continue
		}
		if *f.dst, err = strconv.ParseUint(s, 10, 64); err != nil {
			return u, fmt.Errorf("reading the usage of %s: %s=%q: %w", v.Name, f.prop, s, err)
		}
	}
	return u, nil
}

// GroupQuota is not had: sandboxd's datasets are siblings under its root,
// and only a parent dataset's quota would bound several of them together
// (a layout change). Callers split their bound (Capabilities.GroupQuota).
func (b *Backend) GroupQuota(ctx context.Context, group string, bytes uint64, vols ...cowfs.Volume) error {
	if bytes == 0 {
		return nil // never made
	}
	return fmt.Errorf("bounding %d volumes together as %q: ZFS datasets of sandboxd's are not under one parent: %w", len(vols), group, cowfs.ErrUnsupported)
}
