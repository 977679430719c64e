package promotion

import (
	"context"
	"github.com/sandboxd/sandboxd/internal/randid"
	"github.com/sandboxd/sandboxd/supervisor/commands"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/supervisor"
	"github.com/sandboxd/sandboxd/supervisor/state"
)

// Host is what the room needs of the core: its Host, and the project
// gate and names the core keeps because creates read them
// (supervisor/host_promotion.go).
type Host interface {
	supervisor.Host
	// ClaimProject marks project as being promoted by pid, or says which
	// promotion is; ReleaseProject ends the claim.
	ClaimProject(project, pid string) (other string, ok bool)
	ReleaseProject(project string)
	// StageProject marks project staged with rollback point rp: until
	// settle (which may be called more than once), creates of its
	// sandboxes take rp as their base, not the project being written.
	StageProject(project string, rp cowfs.Volume) (settle func())
	// ProjectLocation is where sandbox rec's project is now, for the
	// caller of ctx: refused when it is gone, the caller may not use it,
	// or it moved since the sandbox was made.
	ProjectLocation(ctx context.Context, rec state.Record) (string, error)
	// DestroyFor destroys sandbox id as Destroy does, named action in
	// the journal and the audit log.
	DestroyFor(ctx context.Context, id, action string) error
	// OwnerGroups are uid's groups, as the host's user database says.
	OwnerGroups(uid uint32) []uint32
}

// Config is what the room works with.
type Config struct {
	// Stages are where promotions go, in order (none: the project alone).
	Stages []StageConfig
	// Runner runs the checks in their sandbox.
	Runner commands.Runner
}

// Promotions is the promotion room: the plan of stages, and the runs in
// the background.
type Promotions struct {
	h    Host
	cfg  Config
	plan plan
	runs runs
}

// New makes the room over h and joins h's hooks: what a crash left of
// promotions is finished once the sandboxes are reconciled; a destroyed
// sandbox's kept source goes; the daemon's stop waits for the runs.
func New(h Host, cfg Config) *Promotions {
	r := &Promotions{h: h, cfg: cfg}
	r.plan = newPlan(r, cfg.Stages)
	hooks := h.Hooks()
	hooks.AfterReconcile.Add(r.reconcile)
	hooks.Destroyed.Add(func(ctx context.Context, rec state.Record) {
		if r.earlierSource(ctx, rec.ID) != nil {
			if _, err := r.prune(ctx); err != nil {
				h.Log().Warn("deleting a destroyed sandbox's promotion source", "SANDBOX_ID", rec.ID, "error", err)
			}
		}
	})
	hooks.Close.Add(r.runs.close)
	for _, err := range []error{ErrNoPromotion, ErrNothingToPromote, ErrChecksOutsideSandbox, ErrChangeDiffers} {
		hooks.Refusals.Add(err)
	}
	return r
}

// Stages are the room's stages, in order.
func (r *Promotions) Stages() []Stage { return r.plan }

func newID() string {
	return randid.Hex(6)
}
