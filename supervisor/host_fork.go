package supervisor

import (
	"context"
	"fmt"
	"slices"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/supervisor/state"
	"github.com/sandboxd/sandboxd/units"
)

// What the fork room (supervisor/fork) needs of the core beyond Host: a
// sandbox made as Create makes one (admission, the record first, its own
// id, id block, quota and scope, the same crash points and undo), whose
// copy of the project and system layer are a source sandbox's as they
// stood, and whose base is a snapshot of the source's base.

// ForkSource is what a fork is made of: the source's record, and
// read-only snapshots of its copy of the project and of its system layer
// (zero: it has none), taken together; or, with Hold, the source's own
// volumes, which the fork's create snapshots while Hold holds them still.
type ForkSource struct {
	Record state.Record
	Volume cowfs.Volume
	Layer  cowfs.Volume
	// Hold (nil: none) holds the source still (its lock, frozen) until
	// release, which may be called again (a no-op then).
	Hold func(context.Context) (release func() error, err error)
}

// CreateFork makes a fork of src.Record named name ("": none): the
// source's options (project, owner, limits, disk quota, network, profile,
// hidden and read-only paths, environment, boot) and its time to live
// counted from now. The owner's bounds count it (Policy.Admit).
func (h host) CreateFork(ctx context.Context, src ForkSource, name string) (Sandbox, error) {
	rec := src.Record
	opts, err := optionsOf(rec)
	if err != nil {
		return Sandbox{}, fmt.Errorf("forking sandbox %s: %w", rec.ID, err)
	}
	opts.Name, opts.fork = name, &src
	if !rec.Expires.IsZero() {
		opts.TTL = max(rec.Expires.Sub(rec.Created), 1)
	}
	return h.s.Create(ctx, opts)
}

// optionsOf is what a create of a sandbox like rec asks for: its project,
// owner, limits, disk quota, profile, network and boot.
func optionsOf(rec state.Record) (CreateOptions, error) {
	opts := CreateOptions{
		Project: rec.Project, Owner: rec.Owner, DiskQuota: rec.DiskQuota, Profile: rec.Profile,
		Network: rec.Network, Allow: rec.Allow, ReadOnlyProject: &rec.ReadOnlyProject, Boot: rec.Boot,
	}
	if err := units.UnmarshalLimits(rec.Limits, &opts.Limits); err != nil {
		return opts, fmt.Errorf("its limits: %w", err)
	}
	return opts, nil
}

// forkBase is a fork's own base, named name: a read-only snapshot of its
// source's (so diff, rebase and promotion measure against the same
// project state, and the fork keeps it when the source goes).
func forkBase(ctx context.Context, b cowfs.Backend, src state.Record, name string) (cowfs.Volume, error) {
	base, err := b.Get(ctx, src.Base)
	if err != nil {
		return base, fmt.Errorf("the base of sandbox %s: %w", src.ID, err)
	}
	return b.Snapshot(ctx, base, name, true)
}

// withSource is a fork's hidden (or read-only) paths: its source's, and
// those the host and profile give a sandbox now (added since the source
// was made), each once.
func withSource(src, now []string) []string {
	return slices.Concat(src, slices.DeleteFunc(slices.Clone(now), func(p string) bool { return slices.Contains(src, p) }))
}
