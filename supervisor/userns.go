package supervisor

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/supervisor/idmap"
	"github.com/sandboxd/sandboxd/supervisor/projects"
	"github.com/sandboxd/sandboxd/supervisor/state"
	"github.com/sandboxd/sandboxd/supervisor/userns"
)

// Sandboxes in user namespaces: root in their own sandbox, nobody on the
// host. The policy is supervisor/userns's, the blocks of ids
// supervisor/idmap's; the core holds what the probe found.

// UserNS says whether and how sandboxes get user namespaces; its modes.
type UserNS = userns.Config

const (
	UserNSAuto    = userns.Auto
	UserNSRequire = userns.Require
	UserNSOff     = userns.Off
	IDBlock       = userns.Block
)

// ErrNoIdmap: the sandbox has no user namespace of its own (userns).
var ErrNoIdmap = userns.ErrNoIdmap

// usernsState is what ProbeUserNS found.
type usernsState struct {
	cfg UserNS
	// unavailable says why sandboxes get no user namespace (nil: they do).
	unavailable error
}

// ProbeUserNS finds whether sandboxes can have user namespaces here
// (userns.Probe). With UserNSRequire, an error if not; otherwise the
// reason is logged and sandboxes are made without. Call it once, before
// serving.
func (s *Supervisor) ProbeUserNS(ctx context.Context) error {
	cfg := s.cfg.UserNS
	s.userns = usernsState{cfg: cfg, unavailable: userns.Probe(cfg, s.cfg.InitCommand, s.cfg.Backend.Info())}
	switch {
	case s.userns.unavailable == nil:
		s.log.Info("sandboxes get user namespaces", "root_layers", strings.Join(cfg.RootLayers, ":"),
			"ids", fmt.Sprintf("%d-%d", cfg.First, uint64(cfg.First)+uint64(cfg.Count)-1))
	case cfg.Mode == UserNSRequire:
		return fmt.Errorf("user namespaces are required (sandbox.userns = %q): %w", cfg.Mode, s.userns.unavailable)
	case cfg.Mode == UserNSAuto:
		s.log.Warn("sandboxes get no user namespace: root inside one is for root callers only", "reason", s.userns.unavailable.Error())
	}
	return nil
}

// allocateIDs picks the sandbox's block; nil: no user namespace here.
func (u *usernsState) allocateIDs(recs []state.Entry, owner uint32) (*state.IDMap, error) {
	m, err := userns.Allocate(u.cfg, u.unavailable, recs, owner)
	if full := (*idmap.ExhaustedError)(nil); errors.As(err, &full) {
		return nil, fmt.Errorf("%w: %w", err, ErrLimitReached)
	}
	return m, err
}

// canBoot refuses a booted sandbox where its systemd would not be
// contained (userns.CanBoot).
func (u *usernsState) canBoot(opts CreateOptions) error {
	if !opts.Boot {
		return nil
	}
	return userns.CanBoot(opts.Network, u.unavailable, ErrInvalid)
}

// ownTopDir gives the top of rec's copy of its project to its owner
// (userns.OwnTopDir).
func ownTopDir(reg *projects.Registry, rec state.Record, vol cowfs.Volume) error {
	p, ok := reg.Get(rec.Project)
	return userns.OwnTopDir(rec, vol, ok && len(p.At) > 1)
}
