package promotion

// A promotion's checks: the project stage's checks run in a sandbox of the
// promoted project; privileged files are refused unless an admin allows.

import (
	"context"
	"fmt"
	"github.com/sandboxd/sandboxd/supervisor/commands"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/internal/crashpoint"
	"github.com/sandboxd/sandboxd/promote"
	"github.com/sandboxd/sandboxd/runtime/nsinit"
	"github.com/sandboxd/sandboxd/supervisor"
	"github.com/sandboxd/sandboxd/supervisor/audit"
	"github.com/sandboxd/sandboxd/supervisor/state"
	"github.com/sandboxd/sandboxd/supervisor/volname"
)

const (
	defaultCheckTimeout = 10 * time.Minute
	// checkOutput is how much of a check's output its record keeps (the
	// end, where failures are told).
	checkOutput = 4 << 10
)

// checkPrivileged refuses a change set that carries set-id files, device
// nodes or file capabilities, or (from a promoter other than root) gives
// a path to an owner other than the promoter (root, www-data, another
// user), naming each, unless allow (an admin's
// word), which is then logged and audited with the paths.
func (r *Promotions) checkPrivileged(ctx context.Context, p *Promotion, changes []cowfs.Change, source, base cowfs.Volume, allow bool) error {
	found, err := promote.Privileged(ctx, changes, source.Path, "") // root's own files are root's to give
	if p.Owner != 0 {
		// Root in the sandbox may give its copy's files to anyone; its
		// promoter may give the host's only to itself and its groups.
		found, err = promote.PrivilegedFor(ctx, changes, source.Path, base.Path, promote.Promoter{UID: p.Owner, GIDs: r.h.OwnerGroups(p.Owner)})
	}
	if err != nil {
		return err
	}
	if len(found) == 0 {
		return nil
	}
	perr := &promote.PrivilegedError{Paths: found}
	if !allow {
		return fmt.Errorf("%w; an admin may allow them (sandboxctl promote --allow-privileged)", perr)
	}
	p.AllowPrivileged = true
	paths := make([]string, len(found))
	for i, f := range found {
		paths[i] = f.String()
	}
	r.h.Log().Warn("promotion carries privileged files, allowed by an admin", "promotion", p.ID, "SANDBOX_ID", p.Sandbox,
		"CALLER_UID", p.Owner, "paths", strings.Join(paths, ", "))
	r.h.AuditEntry(ctx, audit.Entry{Action: "promote-privileged", Command: "allowed by an admin: " + strings.Join(paths, ", "),
		Promotion: &audit.Promotion{ID: p.ID, State: string(p.State), Changes: p.Changes, Digest: p.Digest}},
		state.Record{ID: p.Sandbox, Project: p.Project}, nil)
	return nil
}

// failedCheck is the error of the first check that did not pass.
func failedCheck(results []state.CheckResult) error {
	for _, r := range results {
		if r.How != nsinit.Exited || r.Status != 0 {
			return fmt.Errorf("check %q failed (%s, status %d)", r.Command, r.How, r.Status)
		}
	}
	return nil
}

// checkInSandbox runs the stage's checks, one after the other, in a new
// sandbox of the promoted project, so that a check that writes cannot
// change it; the sandbox goes after. The sandbox is the daemon's own
// (its owner the promoter): the promoter's right to the project was
// checked by Promote.
func (r *Promotions) checkInSandbox(ctx context.Context, p *Promotion, st StageConfig) (results []state.CheckResult, err error) {
	crashpoint.Hit(crashpoint.PromoteChecking)
	// A stage runs in the background as the daemon's own work (runs.go);
	// a call that names no one is refused, never taken for the daemon's.
	a, err := supervisor.ActorOf(ctx)
	if err != nil {
		return nil, fmt.Errorf("making a sandbox for the checks: %w", err)
	}
	if a.Daemon != "" {
		ctx = supervisor.WithActor(ctx, supervisor.Daemon("promotion checks"))
	}
	timeout := checkTimeout(st)
	sb, err := r.h.Create(ctx, supervisor.CreateOptions{
		Project: p.Project, Name: volname.PromotionCheckSandbox(p.ID), Owner: p.Owner,
		TTL: time.Duration(len(st.Checks)+1) * timeout, Applied: true, NoCache: true,
	})
	if err != nil {
		return nil, fmt.Errorf("making a sandbox for the checks: %w", err)
	}
	defer func() {
		if derr := r.h.Destroy(context.WithoutCancel(ctx), sb.ID); derr != nil {
			r.h.Log().Error("destroying a check sandbox", "SANDBOX_ID", sb.ID, "error", derr)
		}
	}()
	for _, check := range st.Checks {
		res, err := r.runCheck(ctx, sb.ID, p.Owner, check, timeout)
		if err != nil {
			return results, err
		}
		results = append(results, res)
		if res.How != nsinit.Exited || res.Status != 0 {
			break // the first failure decides
		}
	}
	return results, nil
}

// runCheck runs command with sh -c in sandbox id as uid, and keeps the
// end of its output.
func (r *Promotions) runCheck(ctx context.Context, id string, uid uint32, command string, timeout time.Duration) (state.CheckResult, error) {
	res := state.CheckResult{Command: command}
	c, err := r.cfg.Runner.RunCaptured(ctx, id, commands.ExecOptions{
		Argv: []string{"/bin/sh", "-c", command}, UID: uid, AsRoot: uid == 0, Timeout: timeout,
	}, checkOutput)
	if err != nil {
		return res, fmt.Errorf("running check %q: %w", command, err)
	}
	res.Duration, res.How, res.Output = c.Took, string(c.How), c.Output
	res.Status = c.Code
	if c.Signal != 0 {
		res.Status = 128 + c.Signal
	}
	return res, nil
}
