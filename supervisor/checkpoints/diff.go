package checkpoints

import (
	"context"
	"io"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/promote/unidiff"
)

// Diff lists what sandbox id changed in its copy of the project since its
// base, from the backend's change list (its cost follows the change, not
// the project, where the backend has FastChanges), less what the
// project's ignore rules leave out (the core's, Host.WithChanges).
func (c *Checkpoints) Diff(ctx context.Context, id string) ([]cowfs.Change, error) {
	changes, _, err := c.DiffCounted(ctx, id)
	return changes, err
}

// DiffCounted is Diff, and how many paths the ignore rules left out.
func (c *Checkpoints) DiffCounted(ctx context.Context, id string) (changes []cowfs.Change, ignored int, err error) {
	err = c.h.WithChanges(ctx, id, "listing the changes of sandbox "+id, func(_, _ cowfs.Volume, ch []cowfs.Change, n int) error {
		changes, ignored = ch, n
		return nil
	})
	return changes, ignored, err
}

// UnifiedDiff writes what sandbox id changed since its base as a unified
// text diff (unidiff.Write): the change list's files only, less what
// the ignore rules leave out.
func (c *Checkpoints) UnifiedDiff(ctx context.Context, id string, w io.Writer, o unidiff.Options) error {
	return c.h.WithChanges(ctx, id, "diffing sandbox "+id, func(base, now cowfs.Volume, changes []cowfs.Change, _ int) error {
		return unidiff.Write(ctx, w, changes, base.Path, now.Path, o)
	})
}
