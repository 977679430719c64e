package supervisor

import (
	"context"
	"fmt"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/supervisor/changeset"
	"github.com/sandboxd/sandboxd/supervisor/state"
	"github.com/sandboxd/sandboxd/supervisor/volname"
)

// WithChanges calls fn with sandbox id's base, a moment's read-only
// snapshot of it (btrfs sends from read-only snapshots), and the change
// list between the two less what the project's ignore rules leave out
// (and how many that was); the snapshot goes after.
func (h host) WithChanges(ctx context.Context, id, what string, fn func(base, now cowfs.Volume, changes []cowfs.Change, ignored int) error) error {
	s := h.s
	defer s.locks.Lock(id)()
	rec, err := s.cfg.Store.Get(id)
	if err != nil {
		return err
	}
	base, err := s.cfg.Backend.Get(ctx, rec.Base)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	vol, err := s.cfg.Backend.Get(ctx, rec.Volume)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	now, err := s.cfg.Backend.Snapshot(ctx, vol, volname.Diff(id, newCommandID()), true)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	defer func() { _ = s.cfg.Backend.Delete(context.WithoutCancel(ctx), now) }()
	changes, err := h.SandboxChanges(ctx, base, now)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	changes, ignored, err := h.FilterChanges(ctx, rec.Project, base, now, changes)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if err := fn(base, now, changes, ignored); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// FrozenSnapshot takes a read-only snapshot of vol, sandbox rec's copy of
// its project, with the sandbox frozen for the instant.
func (h host) FrozenSnapshot(ctx context.Context, rec state.Record, vol cowfs.Volume, name string) (v cowfs.Volume, err error) {
	s := h.s
	if rec.Runs() {
		if err := s.cfg.Units.Freeze(ctx, rec.Unit); err != nil {
			return v, fmt.Errorf("freezing it for a snapshot: %w", err)
		}
		defer func() {
			if terr := s.cfg.Units.Thaw(context.WithoutCancel(ctx), rec.Unit); terr != nil && err == nil {
				err = fmt.Errorf("thawing it after a snapshot: %w", terr)
			}
		}()
	}
	return s.cfg.Backend.Snapshot(ctx, vol, name, true)
}

// SandboxChanges lists what a sandbox changed in its copy since base
// (changeset.Of: less userns.OwnTopDir's metadata of the top directory).
func (h host) SandboxChanges(ctx context.Context, base, now cowfs.Volume) ([]cowfs.Change, error) {
	return changeset.Of(ctx, h.s.cfg.Backend, base, now)
}

// FilterChanges is changeset.Filter with project's configured patterns.
func (h host) FilterChanges(ctx context.Context, project string, base, now cowfs.Volume, changes []cowfs.Change) ([]cowfs.Change, int, error) {
	return changeset.Filter(ctx, h.s.log, h.s.cfg.ProjectIgnore[project], project, base, now, changes)
}
