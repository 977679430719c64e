package btrfs

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	dbtrfs "github.com/dennwc/btrfs"

	"github.com/sandboxd/sandboxd/cowfs"
)

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

// quotaMode reads the quota mode from sysfs: "squota", "qgroup", or ""
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
	limit := uint64(math.MaxUint64) // none
	if bytes > 0 {
		limit = bytes
	}
	if err := limitExclusive(v.Path, limit); err != nil {
		return fmt.Errorf("setting the quota of %s: %w", v.Name, err)
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
