package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/cowfs/btrfs"
	"github.com/sandboxd/sandboxd/units"
)

// primitiveReps is how many times each primitive runs, at each live count.
const primitiveReps = 30

// primitives are what a create is made of, each timed alone: the two
// snapshots and the empty subvolume a sandbox's volumes are, and the
// start and stop of a scope holding one process, in the slice of the
// sandboxes (whose other scopes are its siblings) and in an empty one.
type primitives struct {
	snapshots, subvolume, deletes series // btrfs
	scope, scopeAlone, stop       series // systemd
}

// scratchPool is where the btrfs primitives make their subvolumes: a
// directory of the filesystem the daemon's pool is on, which its
// sandboxes' subvolumes fill.
const scratchPool = "bench-scale-primitives"

// scratchBackend opens a btrfs backend on scratchPool; done removes the
// directory, which must be empty by then.
func scratchBackend(ctx context.Context, fs *btrfsFS) (b *btrfs.Backend, done func() error, err error) {
	root := filepath.Join(fs.mount, scratchPool)
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, nil, err
	}
	done = func() error { return os.Remove(root) }
	if b, err = btrfs.Open(ctx, root); err != nil {
		return nil, nil, errors.Join(fmt.Errorf("opening a btrfs pool at %s: %w", root, err), done())
	}
	return b, done, nil
}

// measurePrimitives times each primitive primitiveReps times, with
// project the (btrfs) project to snapshot, its scopes in slice.
func measurePrimitives(ctx context.Context, fs *btrfsFS, project, slice string) (p primitives, err error) {
	b, done, err := scratchBackend(ctx, fs)
	if err != nil {
		return p, err
	}
	defer func() { err = errors.Join(err, done()) }()
	src, err := b.Project(ctx, project)
	if err != nil {
		return p, err
	}
	m, err := units.Connect(ctx)
	if err != nil {
		return p, err
	}
	defer m.Close()
	for i := range primitiveReps {
		var base, vol, layer cowfs.Volume
		d, err := timed(func() (err error) {
			if base, err = b.Snapshot(ctx, src, fmt.Sprintf("base%d", i), true); err != nil {
				return err
			}
			vol, err = b.Snapshot(ctx, base, fmt.Sprintf("vol%d", i), false)
			return err
		})
		if err != nil {
			return p, fmt.Errorf("snapshotting %s: %w", project, err)
		}
		p.snapshots = append(p.snapshots, d)
		d, err = timed(func() (err error) {
			layer, err = b.Create(ctx, fmt.Sprintf("layer%d", i))
			return err
		})
		if err != nil {
			return p, fmt.Errorf("making a subvolume: %w", err)
		}
		p.subvolume = append(p.subvolume, d)
		d, err = timed(func() error { return errors.Join(b.Delete(ctx, layer), b.Delete(ctx, vol), b.Delete(ctx, base)) })
		if err != nil {
			return p, fmt.Errorf("deleting the subvolumes: %w", err)
		}
		p.deletes = append(p.deletes, d)
		for _, alone := range []bool{false, true} {
			in := slice
			if alone {
				in = "sandboxd-bench.slice"
			}
			start, stop, err := scopeOnce(ctx, m, fmt.Sprintf("bench-scale-%d-%t.scope", i, alone), in)
			if err != nil {
				return p, err
			}
			if alone {
				p.scopeAlone = append(p.scopeAlone, start)
			} else {
				p.scope, p.stop = append(p.scope, start), append(p.stop, stop)
			}
		}
	}
	return p, nil
}

// scopeOnce starts a scope holding a sleep in slice and stops it; it
// returns how long each took.
func scopeOnce(ctx context.Context, m *units.Manager, name, slice string) (start, stop time.Duration, err error) {
	cmd := exec.CommandContext(ctx, "sleep", "60")
	if err := cmd.Start(); err != nil {
		return 0, 0, err
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	s := units.Scope{Name: name, PIDs: []int{cmd.Process.Pid}, Slice: slice}
	d, err := timed(func() error { return m.StartScope(ctx, s) })
	if err != nil {
		return 0, 0, fmt.Errorf("starting a scope in %s: %w", slice, err)
	}
	e, err := timed(func() error { return m.Stop(ctx, name) })
	_ = m.ResetFailed(ctx, name)
	if err != nil {
		return 0, 0, fmt.Errorf("stopping scope %s: %w", name, err)
	}
	return d, e, nil
}
