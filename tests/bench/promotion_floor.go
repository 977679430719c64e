package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/cowfs"
)

// promotionFloor times what a promotion of `changed` files of the project
// of n files (its tree at dir) cannot go below, with no daemon: a
// read-only snapshot of the project (its rollback point), the same kind
// of change written into the project's tree directly, and syncfs, which
// makes the change durable. Each run changes files no other run touched.
func promotionFloor(ctx context.Context, cfg config, fs *btrfsFS, n int, dir string, changed int, used touched) (s series, err error) {
	b, done, err := scratchBackend(ctx, fs)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, done()) }()
	project, err := b.Project(ctx, filepath.Join(fs.mount, projectPath(n)))
	if err != nil {
		return nil, err
	}
	k := 0
	l := loop{reps: cfg.promoteReps, min: minReps, budget: cfg.budget}
	err = l.run(ctx, fmt.Sprintf("promotion floor %s, %d changed", count(n), changed), func(warm bool) error {
		if err := fs.settle(ctx); err != nil {
			return err
		}
		k++
		var snap cowfs.Volume
		dt, err := timed(func() (err error) {
			if snap, err = b.Snapshot(ctx, project, fmt.Sprintf("floor%d", k), true); err != nil {
				return err
			}
			if _, err := changeFiles(dir, n, changed, false, used); err != nil {
				return err
			}
			return syncfs(dir)
		})
		if snap.Name != "" {
			err = errors.Join(err, b.Delete(ctx, snap))
		}
		if err == nil && !warm {
			s = append(s, dt)
		}
		return err
	})
	return s, err
}

func syncfs(dir string) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.Syncfs(fd); err != nil {
		return fmt.Errorf("syncfs of %s: %w", dir, err)
	}
	return nil
}
