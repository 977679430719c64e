package supervisor

import (
	"context"
	"fmt"

	"github.com/sandboxd/sandboxd/supervisor/projects"
	"github.com/sandboxd/sandboxd/supervisor/state"
	"github.com/sandboxd/sandboxd/supervisor/volname"
)

// The core's side of the project registry (supervisor/projects): the
// registry's types under the names rooms see through Host, the check of
// an actor's right to use a project, and where a sandbox's project is
// now for the calls that read or write it.

// Project is a project sandboxes can be made of (projects.Project).
type Project = projects.Project

// ProjectAccess says who may use a project besides root and admins
// (projects.Access).
type ProjectAccess = projects.Access

// Where a project comes from.
const (
	OriginConfig = projects.OriginConfig
	OriginAdded  = projects.OriginAdded
)

// ErrAccessDenied: the caller may not use the project (make a sandbox of
// it, promote into it), or may not do what it asked.
var ErrAccessDenied = projects.ErrAccessDenied

// ErrProjectMoved: a sandbox's project is no longer where it was when
// the sandbox was made (removed and added again elsewhere, or moved in
// sandboxd.toml); the sandbox's base is of the old volume.
var ErrProjectMoved = fmt.Errorf("project moved: %w", ErrWrongState)

// ProjectMove is how far a sandbox's project moved on since its base.
type ProjectMove = projects.Move

// Projects is the project registry: the front door adds, removes and
// lists projects there, and the daemon loads the recorded ones.
func (s *Supervisor) Projects() *projects.Registry { return s.projects }

// MayUseProject says whether a may use project name: nil, or an error
// wrapping ErrAccessDenied that names the project, the caller and who
// may (ErrNoActor when a names no one). An unknown project is nil here:
// the caller's own lookup tells that.
func (s *Supervisor) MayUseProject(ctx context.Context, a Actor, name string) error {
	if !a.Named() {
		return fmt.Errorf("checking who may use project %q: %w", name, ErrNoActor)
	}
	return s.projects.MayUse(ctx, projects.Who{UID: a.UID, GIDs: a.GIDs, Privileged: a.Privileged()}, name)
}

// ProjectLocation is where sandbox rec's project is now, for a call that
// reads the project or writes into it for the caller of ctx (a rebase,
// its change list, a promotion): refused when the project is gone, when
// the caller may no longer use it (as Create checks), and when the
// project is no longer where the sandbox was made of it.
func (h host) ProjectLocation(ctx context.Context, rec state.Record) (string, error) {
	s := h.s
	location := s.projects.Location(rec.Project)
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

// ProjectMoves lists what sandbox id's project changed since the
// sandbox's base (projects.Registry.Moves), for its caller.
func (s *Supervisor) ProjectMoves(ctx context.Context, id string) (ProjectMove, error) {
	rec, err := s.cfg.Store.Get(id)
	if err != nil {
		return ProjectMove{}, err
	}
	return host{s}.projectMoves(ctx, rec)
}

func (h host) projectMoves(ctx context.Context, rec state.Record) (ProjectMove, error) {
	s := h.s
	what := "reading how the project of sandbox " + rec.ID + " moved"
	location, err := h.ProjectLocation(ctx, rec)
	if err != nil {
		return ProjectMove{}, fmt.Errorf("%s: %w", what, err)
	}
	return s.projects.Moves(ctx, what, location, rec.Base, volname.Diff(rec.ID, "p"+newCommandID()))
}

// ValidateSandboxName checks a sandbox's name (projects.ValidateSandboxName).
func ValidateSandboxName(name string) error { return projects.ValidateSandboxName(name) }

// nameFree says whether no record is named name ("": none asked). Names are
// unique among all the records, a destroying sandbox's too: its name is
// free once it is gone.
func nameFree(recs []state.Entry, name string) error {
	for _, r := range recs {
		if name != "" && r.Name == name {
			return fmt.Errorf("a sandbox named %q exists; pick another name or destroy it: %w", name, ErrExists)
		}
	}
	return nil
}
