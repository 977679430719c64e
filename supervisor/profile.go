package supervisor

import (
	"fmt"
	"slices"
	"time"

	"github.com/sandboxd/sandboxd/supervisor/egress"
	"github.com/sandboxd/sandboxd/supervisor/nsinit"
	"github.com/sandboxd/sandboxd/units"
)

// Profile is a named bundle of a sandbox's settings (sandboxd.toml's
// [profile.NAME]). A create names one; its own settings override the
// profile's, field by field.
type Profile struct {
	// Network is nsinit.NetworkNone (default), NetworkAllowlist or
	// NetworkHost; Allow lists what an allowlist lets through.
	Network string
	Allow   []string
	Limits  units.Limits
	// DiskQuota in bytes and TTL: 0 for none.
	DiskQuota       uint64
	TTL             time.Duration
	ReadOnlyProject bool
	// Hidden and ReadOnly host paths, on top of the host's own lists.
	Hidden, ReadOnly []string
}

// resolveProfile fills what opts leaves unset from its profile (the
// default one when it names none) and checks the network settings.
func (s *Supervisor) resolveProfile(opts *CreateOptions) error {
	if opts.Profile == "" {
		opts.Profile = s.cfg.DefaultProfile
	}
	var p Profile
	if opts.Profile != "" {
		var ok bool
		if p, ok = s.cfg.Profiles[opts.Profile]; !ok {
			names := make([]string, 0, len(s.cfg.Profiles))
			for n := range s.cfg.Profiles {
				names = append(names, n)
			}
			slices.Sort(names)
			return fmt.Errorf("profile %q is not configured (there are: %v): %w", opts.Profile, names, ErrInvalid)
		}
	}
	switch {
	case opts.Network == "" && len(opts.Allow) > 0:
		opts.Network = nsinit.NetworkAllowlist // an allowlist given is the network asked for
	case opts.Network == "":
		opts.Network, opts.Allow = p.Network, p.Allow
	}
	if opts.Network == "" {
		opts.Network = nsinit.NetworkNone
	}
	switch opts.Network {
	case nsinit.NetworkNone, nsinit.NetworkHost:
		if len(opts.Allow) > 0 {
			return fmt.Errorf("an allowlist is given but the network is %q: %w", opts.Network, ErrInvalid)
		}
	case nsinit.NetworkAllowlist:
		if len(opts.Allow) == 0 {
			return fmt.Errorf("the network is an allowlist with nothing in it (use %q for no network): %w", nsinit.NetworkNone, ErrInvalid)
		}
		if _, err := egress.ParseAllowlist(opts.Allow); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalid, err)
		}
	default:
		return fmt.Errorf("network %q: want %q, %q or %q: %w", opts.Network,
			nsinit.NetworkNone, nsinit.NetworkAllowlist, nsinit.NetworkHost, ErrInvalid)
	}
	mergeLimits(&opts.Limits, p.Limits)
	if opts.DiskQuota == 0 {
		opts.DiskQuota = p.DiskQuota
	}
	if opts.TTL == 0 {
		opts.TTL = p.TTL
	}
	if opts.ReadOnlyProject == nil {
		opts.ReadOnlyProject = &p.ReadOnlyProject
	}
	opts.hidden = union(s.cfg.Hidden, p.Hidden)
	opts.readOnly = union(s.cfg.ReadOnly, p.ReadOnly)
	return nil
}

// mergeLimits fills each limit l leaves unset from p.
func mergeLimits(l *units.Limits, p units.Limits) {
	fill := func(dst **uint64, src *uint64) {
		if *dst == nil && src != nil {
			*dst = src
		}
	}
	fillDur := func(dst **time.Duration, src *time.Duration) {
		if *dst == nil && src != nil {
			*dst = src
		}
	}
	fill(&l.MemoryMax, p.MemoryMax)
	fill(&l.MemoryHigh, p.MemoryHigh)
	fill(&l.MemorySwapMax, p.MemorySwapMax)
	fill(&l.TasksMax, p.TasksMax)
	fill(&l.CPUWeight, p.CPUWeight)
	fill(&l.IOWeight, p.IOWeight)
	fillDur(&l.CPUQuota, p.CPUQuota)
	fillDur(&l.RuntimeMax, p.RuntimeMax)
}

func union(a, b []string) []string {
	out := slices.Clone(a)
	for _, x := range b {
		if !slices.Contains(out, x) {
			out = append(out, x)
		}
	}
	return out
}
