package projects

import (
	"context"
	"fmt"
	"time"

	"github.com/sandboxd/sandboxd/cowfs"
)

// Move is how far a sandbox's project moved on since its base.
type Move struct {
	// Paths the project changed since the base, metadata-only changes
	// (access times of a read) left out.
	Paths []string
	// Base is when the base was taken.
	Base time.Time
}

// Moves lists what project location changed since base, a sandbox's
// base (a read-only snapshot of it), snapshotting the project as name
// for the while. Its cost follows the change (a snapshot of the project
// and the backend's change list), not the project. what names the work
// in errors.
func (r *Registry) Moves(ctx context.Context, what, location, base, name string) (Move, error) {
	m := Move{}
	project, err := r.cfg.Backend.Project(ctx, location)
	if err != nil {
		return m, fmt.Errorf("%s: %w", what, err)
	}
	b, err := r.cfg.Backend.Get(ctx, base)
	if err != nil {
		return m, fmt.Errorf("%s: %w", what, err)
	}
	m.Base = b.Created
	now, err := r.cfg.Backend.Snapshot(ctx, project, name, true)
	if err != nil {
		return m, fmt.Errorf("%s: %w", what, err)
	}
	defer func() { _ = r.cfg.Backend.Delete(context.WithoutCancel(ctx), now) }()
	changes, err := r.cfg.Backend.Changes(ctx, b, now)
	if err != nil {
		return m, fmt.Errorf("%s: %w", what, err)
	}
	for _, c := range changes {
		if c.Kind == cowfs.Metadata || c.Type == cowfs.TypeDir && c.Kind == cowfs.Modified {
			continue
		}
		m.Paths = append(m.Paths, c.Path)
	}
	return m, nil
}
