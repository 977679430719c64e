package supervisor

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/sandboxd/sandboxd/units"
)

// ApplyUserLimits sets Config.UserLimits on every owner's slice that
// exists, as the daemon starts: a bound an earlier configuration set
// and this one leaves out is lifted (systemd keeps a slice's limits for
// the boot), so that the configuration read is the one in force.
// Creates set them on the slices made later.
func (s *Supervisor) ApplyUserLimits(ctx context.Context) error {
	found, err := s.cfg.Units.List(ctx, units.OwnerSlices)
	if err != nil {
		return fmt.Errorf("applying the per-user limits: listing the users' slices: %w", err)
	}
	l := s.cfg.UserLimits
	none := uint64(math.MaxUint64) // systemd's infinity
	if l.MemoryMax == nil {
		l.MemoryMax = &none
	}
	if l.TasksMax == nil {
		l.TasksMax = &none
	}
	var errs []error
	for _, u := range found {
		if !units.IsOwnerSlice(u.Name) {
			continue // a bucket of scopes (units.ScopeSlice): its owner's bounds hold it
		}
		if err := s.cfg.Units.SetSliceLimits(ctx, u.Name, l); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
