package supervisor

import (
	"context"
)

// joinRooms adds the hooks of the capabilities that still live in this
// package; each moves to a room of its own, which adds them itself.
func (s *Supervisor) joinRooms() {
	h := &s.hooks
	// Checkpoints: rollbacks a crash interrupted are finished before the
	// sandboxes start again.
	h.BeforeReconcile.Add(func(ctx context.Context, v ReconcileView) error {
		return s.finishRollbacks(ctx, v.Records, v.Volumes, v.Active)
	})
}
