package supervisor

import (
	"context"
	"fmt"
	"time"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/supervisor/state"
)

// ErrProjectMoved: a sandbox's project is no longer where it was when
// the sandbox was made (removed and added again elsewhere, or moved in
// sandboxd.toml); the sandbox's base is of the old volume.
var ErrProjectMoved = fmt.Errorf("project moved: %w", ErrWrongState)

// projectLocation is where sandbox rec's project is now, for a call that
// reads the project or writes into it for the caller of ctx (a rebase,
// its change list, a promotion): refused when the project is gone, when
// the caller may no longer use it (as Create checks), and when the
// project is no longer where the sandbox was made of it.
func (s *Supervisor) projectLocation(ctx context.Context, rec state.Record) (string, error) {
	location := s.projects.location(rec.Project)
	if location == "" {
		return "", fmt.Errorf("its project %q is gone: %w", rec.Project, ErrUnknownProject)
	}
	if err := s.mayUseProject(ctx, rec.Project); err != nil {
		return "", err
	}
	if rec.ProjectLocation != "" && rec.ProjectLocation != location {
		return "", fmt.Errorf("its project %q is now at %s, not at %s where the sandbox was made of it, so the sandbox's base is of another volume; "+
			"make a new sandbox of the project: %w", rec.Project, location, rec.ProjectLocation, ErrProjectMoved)
	}
	return location, nil
}

// ProjectMove is how far a sandbox's project moved on since its base.
type ProjectMove struct {
	// Paths the project changed since the base, metadata-only changes
	// (access times of a read) left out.
	Paths []string
	// Base is when the base was taken.
	Base time.Time
}

// ProjectMoves lists what sandbox id's project changed since the
// sandbox's base. Its cost follows the change (a snapshot of the project
// and the backend's change list), not the project.
func (s *Supervisor) ProjectMoves(ctx context.Context, id string) (ProjectMove, error) {
	rec, err := s.cfg.Store.Get(id)
	if err != nil {
		return ProjectMove{}, err
	}
	return s.projectMoves(ctx, rec)
}

func (s *Supervisor) projectMoves(ctx context.Context, rec state.Record) (ProjectMove, error) {
	what := "reading how the project of sandbox " + rec.ID + " moved"
	m := ProjectMove{}
	location, err := s.projectLocation(ctx, rec)
	if err != nil {
		return m, fmt.Errorf("%s: %w", what, err)
	}
	project, err := s.cfg.Backend.Project(ctx, location)
	if err != nil {
		return m, fmt.Errorf("%s: %w", what, err)
	}
	base, err := s.cfg.Backend.Get(ctx, rec.Base)
	if err != nil {
		return m, fmt.Errorf("%s: %w", what, err)
	}
	m.Base = base.Created
	now, err := s.cfg.Backend.Snapshot(ctx, project, DiffName(rec.ID, "p"+newCommandID()), true)
	if err != nil {
		return m, fmt.Errorf("%s: %w", what, err)
	}
	defer func() { _ = s.cfg.Backend.Delete(context.WithoutCancel(ctx), now) }()
	changes, err := s.cfg.Backend.Changes(ctx, base, now)
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
