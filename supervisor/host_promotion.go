package supervisor

import (
	"context"
	"github.com/sandboxd/sandboxd/supervisor/idmap"

	"github.com/sandboxd/sandboxd/cowfs"
)

// What the promotion room (supervisor/promotion) needs of the core
// beyond Host: the project gate, which creates read (which snapshot a
// create takes while a stage is under way: projects.Gate), where a
// sandbox's project is for its caller, a destroy named for what a
// crash left, and the owner's groups.

// ClaimProject marks project as being promoted by pid, or says which
// promotion is.
func (h host) ClaimProject(project, pid string) (other string, ok bool) {
	return h.s.projects.Gate().Claim(project, pid)
}

// ReleaseProject ends ClaimProject's claim.
func (h host) ReleaseProject(project string) { h.s.projects.Gate().Release(project) }

// StageProject marks project staged with rollback point rp, and returns
// what settles it (projects.Gate.Stage).
func (h host) StageProject(project string, rp cowfs.Volume) (settle func()) {
	return h.s.projects.Gate().Stage(project, rp)
}

// DestroyFor is Destroy, named action in the journal and audit log.
func (h host) DestroyFor(ctx context.Context, id, action string) error {
	return h.s.destroy(ctx, id, action)
}

// OwnerGroups are uid's groups (its primary group and the others it is
// in, as the host's user database says now).
func (h host) OwnerGroups(uid uint32) []uint32 { return idmap.OwnerGroups(uid) }
