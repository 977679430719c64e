package supervisor

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/runtime/nsinit"
	"github.com/sandboxd/sandboxd/supervisor/state"
)

// joinRooms adds the hooks of the capabilities that still live in this
// package; each moves to a room of its own, which adds them itself.
func (s *Supervisor) joinRooms() {
	h := &s.hooks
	// Commands, files and background processes.
	h.Busy.Add(func(ctx context.Context, id string) bool {
		if s.fileCalls.running(id) {
			return true
		}
		s.commands.mu.Lock()
		for k := range s.commands.m {
			if strings.HasPrefix(k, id+"/") {
				s.commands.mu.Unlock()
				return true
			}
		}
		s.commands.mu.Unlock()
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		ps, err := nsinit.ListProcesses(ctx, nsinit.Control(s.runtimeDir(id)))
		return err != nil || slices.ContainsFunc(ps, nsinit.Process.Running) // unknown: busy
	})
	h.Started.Add(s.watchAdopted)
	h.Stopped.Add(s.stopWatch)
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
	// Adoption: recorded adoptions are finished or undone, and mounted
	// again, before their projects load.
	h.LoadProjects.Add(s.reconcileAdoptions)
}
