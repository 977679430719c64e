package supervisor

import (
	"context"

	"github.com/sandboxd/sandboxd/supervisor/state"
	"github.com/sandboxd/sandboxd/units"
)

// Staleness values: whether the project moved on since the sandbox's base.
const (
	Current      = "current"
	Stale        = "stale"
	StaleUnknown = "unknown" // the backend cannot tell without reading files
)

// Inspection is what a sandbox's live state reads: how its project moved
// on since its base, and what it uses now.
type Inspection struct {
	Staleness string
	// Memory, CPU (ns) and Tasks of its scope; Known is false where the
	// host does not account it.
	Memory, CPU, Tasks units.Amount
	// MemoryPeak is the most memory (bytes) its scope used at once since
	// the scope started (a rebase or restore starts it anew), read from
	// the memory cgroup of its init: known while the init runs, on a
	// kernel that counts it.
	MemoryPeak units.Amount
	// Disk is what the sandbox wrote (its volume's exclusive bytes), known
	// where the pool has quotas on.
	Disk units.Amount
}

// What Inspect reads: how the project moved (a snapshot of the project
// and a change list), and the live usage (a systemd call and cgroup and
// quota reads). A caller asks only for what it shows.
type Live int

const (
	LiveStaleness Live = 1 << iota
	LiveUsage
	LiveAll = LiveStaleness | LiveUsage
)

// Inspect reads what of a sandbox's staleness and live usage what asks
// for; the rest stays unknown.
func (s *Supervisor) Inspect(ctx context.Context, id string, what Live) (Inspection, error) {
	rec, err := s.cfg.Store.Get(id)
	if err != nil {
		return Inspection{}, err
	}
	in := Inspection{Staleness: StaleUnknown}
	if what&LiveStaleness != 0 {
		in.Staleness = s.staleness(ctx, rec)
	}
	if what&LiveUsage == 0 {
		return in, nil
	}
	if u, err := s.cfg.Units.Usage(ctx, rec.Unit); err == nil {
		in.Memory, in.CPU, in.Tasks = u.Memory, u.CPU, u.Tasks
	}
	if w := s.worlds.get(id); w != nil {
		if peak, err := units.MemoryPeak(w.pid); err == nil {
			in.MemoryPeak = units.Amount{Value: peak, Known: true}
		}
	}
	if vol, err := s.cfg.Backend.Get(ctx, rec.Volume); err == nil {
		if du, err := s.cfg.Backend.Usage(ctx, vol); err == nil {
			in.Disk = units.Amount{Value: du.Exclusive, Known: true}
		}
	}
	return in, nil
}

// staleness says whether rec's project moved on since its base.
func (s *Supervisor) staleness(ctx context.Context, rec state.Record) string {
	if _, err := (host{s}).ProjectLocation(ctx, rec); err != nil {
		return StaleUnknown // not a project the caller may read now
	}
	if s.cfg.Backend.Info().Capabilities.FastChanges {
		// The change list, not the generation: a generation lags until
		// the filesystem commits (seconds after a write on btrfs), and
		// moves with access times too (a read of the project).
		m, err := (host{s}).projectMoves(ctx, rec)
		switch {
		case err != nil:
			return StaleUnknown
		case len(m.Paths) > 0:
			return Stale
		}
		return Current
	}
	project, perr := s.cfg.Backend.Project(ctx, s.projects.Location(rec.Project))
	base, berr := s.cfg.Backend.Get(ctx, rec.Base)
	if perr != nil || berr != nil {
		return StaleUnknown
	}
	switch changed, err := s.cfg.Backend.ChangedSince(ctx, project, base); {
	case err != nil:
		return StaleUnknown
	case changed:
		return Stale
	}
	return Current
}
