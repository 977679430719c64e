package api

import (
	"github.com/sandboxd/sandboxd/sandboxd1"
	"github.com/sandboxd/sandboxd/supervisor/promotion"
)

// wirePromotion is the promotion record p as GetPromotion sends it: the
// contract's own type, so that the store's record may change without
// changing the wire.
func wirePromotion(p promotion.Promotion) sandboxd1.Promotion {
	out := sandboxd1.Promotion{
		ID: p.ID, Sandbox: p.Sandbox, SandboxName: p.SandboxName, Project: p.Project, Owner: p.Owner,
		State: string(p.State), Source: p.Source, Base: p.Base, Changes: p.Changes, Ignored: p.Ignored, Digest: p.Digest, Force: p.Force, AllowPrivileged: p.AllowPrivileged,
		Conflicts: p.Conflicts, Stages: []sandboxd1.StageRun{}, Created: p.Created, Updated: p.Updated, Error: p.Error,
	}
	for _, c := range p.Changed {
		out.Changed = append(out.Changed, sandboxd1.ChangedPath{Kind: c.Kind, Path: busString(c.Path), NewPath: busString(c.NewPath)})
	}
	if p.Stages == nil {
		out.Stages = nil // the store's record said null: so does the wire
	}
	for _, st := range p.Stages {
		w := sandboxd1.StageRun{
			Name: st.Name, Target: st.Target, State: string(st.State), RollbackPoint: st.RollbackPoint,
			Approval: st.Approval, Approved: st.Approved, DecidedBy: st.DecidedBy, Decided: st.Decided,
			Reason: st.Reason, Started: st.Started, Ended: st.Ended, Error: st.Error,
		}
		for _, c := range st.Checks {
			w.Checks = append(w.Checks, sandboxd1.CheckResult{
				Command: c.Command, Status: c.Status, How: c.How, Duration: c.Duration, Output: c.Output,
			})
		}
		out.Stages = append(out.Stages, w)
	}
	return out
}
