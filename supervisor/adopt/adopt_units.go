package adopt

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/sandboxd/sandboxd/internal/subtree"
	"github.com/sandboxd/sandboxd/supervisor/projects"
	"github.com/sandboxd/sandboxd/units"
)

// An adoption with --restart-units stops the services whose processes use
// the directory and starts again those that were running. Which service a
// process is of is systemd's answer (GetUnitByPID), never the name of the
// cgroup it is in: below a delegated unit (a user's manager, a sandbox's
// scope and the payload/ its systemd divides) the cgroups are named by
// the processes there, which may name one after any host service.

// errHolderEnded: a holder ended while its unit was asked for. A
// server's short-lived worker (a database's backend for one client) does
// so often: the walk is made again.
var errHolderEnded = errors.New("a process using it ended while it was looked at")

// holderWalks is how many walks heldBy makes while holders end under it.
const holderWalks = 8

// heldBy walks for the processes that use paths and asks systemd for
// their services, again while one of them ended meanwhile (its service
// is still known by its other processes, or by a later walk's); after
// holderWalks walks, the last error (errHolderEnded). An error with no
// holders is the walk's; with holders, why their services cannot be
// restarted.
func (s *Adoptions) heldBy(ctx context.Context, paths []string) ([]holder, []units.ProcessUnit, error) {
	for walk := 1; ; walk++ {
		held, err := holders(paths...)
		if err != nil || len(held) == 0 {
			return held, nil, err
		}
		services, err := s.servicesOf(ctx, held)
		if !errors.Is(err, errHolderEnded) || walk == holderWalks {
			return held, services, err
		}
	}
}

// servicesOf is the system services of the holders, once each, with the
// state each was in, or says why one cannot be restarted: a process of no
// service, of a delegated subtree, of a sandbox, of sandboxd or the bus.
func (s *Adoptions) servicesOf(ctx context.Context, held []holder) ([]units.ProcessUnit, error) {
	var out []units.ProcessUnit
	for _, h := range held {
		if h.pid == 0 {
			return nil, fmt.Errorf("more than %d processes use it; sandboxd restarts the services of no more", len(held)-1)
		}
		u, err := s.h.Units().UnitOfPID(ctx, h.pid)
		// systemd answers for the pid, not the process: one that ended
		// since the walk may have left its pid to a process of another
		// unit, which would then be stopped and started in its place.
		if !h.sameProcess() {
			return nil, fmt.Errorf("%s ended while systemd was asked which unit it is of (its pid may be another process's now); try again: %w", h.what, errHolderEnded)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: systemd could not say which unit it is of: %w", h.what, err)
		}
		if err := restartable(u); err != nil {
			return nil, fmt.Errorf("%s is of %s, %w", h.what, u.Name, err)
		}
		if !slices.ContainsFunc(out, func(o units.ProcessUnit) bool { return o.Name == u.Name }) {
			out = append(out, u)
		}
	}
	return out, nil
}

// restartable says why u is not a unit an adoption may stop and start,
// or nil.
func restartable(u units.ProcessUnit) error {
	switch {
	case inSandboxdSlice(u):
		return fmt.Errorf("in sandboxd.slice: a sandbox's processes are never a host service to restart")
	case u.Delegate:
		return fmt.Errorf("a delegated subtree (Delegate=yes: the cgroups below it, and their names, are its processes'): sandboxd restarts no unit for a process there; stop it first")
	case !strings.HasSuffix(u.Name, ".service"):
		return fmt.Errorf("no system service sandboxd could stop and start; stop it first")
	case projects.Untouchable(u.Name):
		return fmt.Errorf("which sandboxd does not stop")
	}
	return nil
}

// inSandboxdSlice says whether u is of sandboxd.slice (a sandbox's scope,
// an owner's slice), by its cgroup or its slice.
func inSandboxdSlice(u units.ProcessUnit) bool {
	return subtree.Within(u.ControlGroup, "/sandboxd.slice") || u.Slice == "sandboxd.slice" || strings.HasPrefix(u.Slice, "sandboxd-")
}

// running says whether a unit in ActiveState state runs (and so is
// started again once its directory is adopted).
func running(state string) bool {
	return state == "active" || state == "reloading" || state == "activating"
}

// namesWithUnits lists hs' descriptions, each with the unit systemd says
// it is of ("pid 12 (nginx) of unit nginx.service").
func (s *Adoptions) namesWithUnits(ctx context.Context, hs []holder) string {
	var out []string
	for _, h := range hs {
		d := h.what
		if h.pid != 0 {
			if u, err := s.h.Units().UnitOfPID(ctx, h.pid); err == nil {
				d += " of unit " + u.Name
			}
		}
		out = append(out, d)
	}
	return strings.Join(out, ", ")
}
