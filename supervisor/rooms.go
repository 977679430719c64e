package supervisor

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/runtime/nsinit"
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
	// Checkpoints: rollbacks a crash interrupted are finished before the
	// sandboxes start again.
	h.BeforeReconcile.Add(func(ctx context.Context, v ReconcileView) error {
		return s.finishRollbacks(ctx, v.Records, v.Volumes, v.Active)
	})
	// Adoption: recorded adoptions are finished or undone, and mounted
	// again, before their projects load.
	h.LoadProjects.Add(s.reconcileAdoptions)
}
