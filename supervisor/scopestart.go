package supervisor

import (
	"context"
	"fmt"
	"github.com/sandboxd/sandboxd/internal/steps"
	"time"

	"github.com/sandboxd/sandboxd/runtime/nsinit"
	"github.com/sandboxd/sandboxd/supervisor/state"
	"github.com/sandboxd/sandboxd/units"
)

// scopes start and stop the sandboxes' systemd scopes, each in its
// owner's slice under the owner's bounds.
type scopes struct {
	units      Units
	userLimits units.Limits // each owner's slice's (Config.UserLimits)
}

// scopeStart is a sandbox's scope on its way. systemd's start of a
// scope is a create's longest step (10-15 ms here, more than the init's
// mounts), so Create begins it as soon as the init is launched, beside
// the snapshots, and the init's build waits for it.
type scopeStart struct {
	done chan struct{}
	err  error
}

// beginScope starts the scope holding init, with its owner's bounds,
// in the background.
func (s *scopes) begin(ctx context.Context, rec state.Record, limits units.Limits, init *nsinit.Init) *scopeStart {
	st := &scopeStart{done: make(chan struct{})}
	go func() {
		defer close(st.done)
		start := time.Now()
		st.err = s.startUnit(ctx, rec, limits, init.PID)
		steps.Of(ctx).Add("scope(beside)", time.Since(start))
	}()
	return st
}

// wait is the scope's start's outcome.
func (st *scopeStart) wait() error {
	<-st.done
	return st.err
}

// startScopeUnit starts the scope of rec holding pid, in its owner's
// slice, whose bounds are set first.
func (s *scopes) startUnit(ctx context.Context, rec state.Record, limits units.Limits, pid int) error {
	if err := s.units.SetSliceLimits(ctx, units.OwnerSlice(rec.Owner), s.userLimits); err != nil {
		return fmt.Errorf("bounding the sandboxes of uid %d together: %w", rec.Owner, err)
	}
	return s.units.StartScope(ctx, units.Scope{
		Name:        rec.Unit,
		Description: fmt.Sprintf("sandboxd sandbox %s of %s", rec.ID, rec.Project),
		PIDs:        []int{pid},
		Slice:       units.ScopeSlice(rec.Owner, rec.Unit),
		Limits:      limits,
		Devices:     units.SandboxDevices,
		Delegate:    rec.Boot,
	})
}

// abandon stops the scope once its start has ended, and kills init: a
// create that failed after beginScope. The scope first: one whose only
// process was killed under it would end failed, and stay listed.
func (s *scopes) abandon(ctx context.Context, rec state.Record, init *nsinit.Init, job *scopeStart) {
	if job != nil && job.wait() == nil {
		_ = s.stop(context.WithoutCancel(ctx), rec.Unit)
	}
	init.Kill()
}
