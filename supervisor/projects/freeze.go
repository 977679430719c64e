package projects

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/units"
)

// A project's host services that write it (Project.Freeze: a database
// beside its app) are frozen while a sandbox's base is snapshotted, so
// that the snapshot holds what they wrote at one point of theirs, not
// half of a write to each of its directories. A few milliseconds: the
// snapshot is one btrfs snapshot of one volume.

// maxFreezeUnits bounds the services a project names.
const maxFreezeUnits = 16

// CheckFreezeUnits checks the services a project would freeze.
func CheckFreezeUnits(names []string) error {
	if len(names) > maxFreezeUnits {
		return fmt.Errorf("%d services to freeze; at most %d: %w", len(names), maxFreezeUnits, ErrInvalidProject)
	}
	for _, n := range names {
		if err := units.CheckServiceName(n); err != nil {
			return fmt.Errorf("a service to freeze: %w: %w", err, ErrInvalidProject)
		}
		if Untouchable(n) {
			return fmt.Errorf("%s cannot be frozen or stopped by sandboxd, which needs it: %w", n, ErrInvalidProject)
		}
	}
	return nil
}

// Untouchable are services sandboxd never freezes or stops: itself and
// the bus it answers on (frozen, no one could thaw them).
func Untouchable(unit string) bool {
	switch unit {
	case "sandboxd.service", "dbus.service", "dbus-broker.service", "systemd-journald.service":
		return true
	}
	return false
}

// freezeCounts counts, per service, the snapshots that want it frozen
// now: overlapping creates of one project freeze it once and thaw it
// after the last.
type freezeCounts struct {
	mu sync.Mutex
	n  map[string]int
}

// FreezeWriters freezes project's writers and returns what thaws them.
// A service that cannot be frozen (not running: it writes nothing) is
// logged and left out.
func (r *Registry) FreezeWriters(ctx context.Context, project string) (thaw func()) {
	p, ok := r.Get(project)
	if !ok {
		return func() {}
	}
	return r.FreezeUnits(ctx, project, p.Freeze)
}

// FreezeUnits freezes project's writers names (see FreezeWriters): an
// adoption's, whose project is not registered yet.
func (r *Registry) FreezeUnits(ctx context.Context, project string, names []string) (thaw func()) {
	if len(names) == 0 {
		return func() {}
	}
	var frozen []string
	begin := time.Now()
	c := &r.frozen
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	for _, u := range names {
		c.n[u]++
		frozen = append(frozen, u)
		if c.n[u] > 1 {
			continue // frozen already, by an overlapping snapshot
		}
		// One that failed may be frozen all the same (a slow freeze
		// past the call's time): it is thawed with the others.
		if err := r.cfg.Units.Freeze(ctx, u); err != nil {
			r.cfg.Log.Warn("a service that writes the project was not frozen for its snapshot", "project", project, "unit", u, "error", err)
		}
	}
	return func() {
		// Under the lock: a thaw must not land after an overlapping
		// snapshot's freeze.
		c.mu.Lock()
		defer c.mu.Unlock()
		var thaw []string
		for _, u := range frozen {
			if c.n[u]--; c.n[u] == 0 {
				delete(c.n, u)
				thaw = append(thaw, u)
			}
		}
		r.thaw(project, thaw)
		r.cfg.Log.Info("froze the services that write the project while it was snapshotted", "project", project,
			"units", strings.Join(frozen, ","), "frozen_for", time.Since(begin).Round(time.Microsecond).String())
	}
}

// thaw thaws services, whatever the caller's context says: a host's
// service must not stay stopped.
func (r *Registry) thaw(project string, names []string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, u := range names {
		if err := r.cfg.Units.Thaw(ctx, u); err != nil {
			r.cfg.Log.Error("thawing a service that writes a project", "project", project, "unit", u, "error", err)
		}
	}
}
