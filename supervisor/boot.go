package supervisor

import (
	"context"
	"fmt"

	"github.com/sandboxd/sandboxd/runtime/nsinit"
	"github.com/sandboxd/sandboxd/supervisor/idmap"
	"github.com/sandboxd/sandboxd/supervisor/state"
)

// Booted sandboxes (CreateOptions.Boot) run a systemd of their own; the
// init's side is runtime/nsinit/boot.go, the design docs/boot.md.

// bootInScope starts the scope first (Delegate=yes), then makes the
// cgroups the init and its systemd live in, then has the init build its
// world and boot. On failure the init is killed and the scope stopped.
func (s *scopes) boot(ctx context.Context, rec state.Record, job *scopeStart, init *nsinit.Init, spec nsinit.Spec, mounts *nsinit.Mounts) error {
	if err := job.wait(); err != nil {
		mounts.Close()
		init.Kill()
		return err
	}
	fail := func(err error) error {
		init.Kill()
		_ = s.stop(context.WithoutCancel(ctx), rec.Unit)
		return err
	}
	ids := idmap.ForInit(rec.IDs)
	payload, err := nsinit.BootCgroups(init.PID, ids.RootUID(), ids.RootGID())
	if err != nil {
		mounts.Close()
		return fail(fmt.Errorf("booting sandbox %s: %w", rec.ID, err))
	}
	defer payload.Close()
	spec.Boot, spec.Payload, spec.LogDirs = true, payload, idmap.LogDirs(ids)
	if err := init.Build(ctx, spec, mounts); err != nil {
		return fail(err)
	}
	return nil
}
