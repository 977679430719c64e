package supervisor

import (
	"context"

	"github.com/sandboxd/sandboxd/supervisor/state"
)

// joinRooms adds the hooks of the capabilities that still live in this
// package; each moves to a room of its own, which adds them itself.
func (s *Supervisor) joinRooms() {
	h := &s.hooks
	// Promotions: those a crash interrupted are finished or undone; the
	// source a destroyed sandbox's last promotion kept is deleted; those
	// running are waited for at the end.
	h.AfterReconcile.Add(s.reconcilePromotions)
	h.Destroyed.Add(func(ctx context.Context, rec state.Record) {
		if s.earlierSource(ctx, rec.ID) != nil {
			if _, err := s.prunePromotions(ctx); err != nil {
				s.log.Warn("deleting a destroyed sandbox's promotion source", "SANDBOX_ID", rec.ID, "error", err)
			}
		}
	})
	h.Close.Add(s.promos.close)
}
