package supervisor

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/runtime/egress"
	"github.com/sandboxd/sandboxd/runtime/nsinit"
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

// Limits every sandbox gets when neither its create, its profile nor
// sandboxd.toml's [limits] sets them: a sandbox without them could take
// the host's memory, processes or pool.
const (
	// maxDefaultMemory caps the derived MemoryMax.
	maxDefaultMemory = 4 << 30
	// defaultTasksMax is the derived TasksMax, unless pid_max/8 is less.
	defaultTasksMax = 4096
	// diskQuotaShare is the pool's size over the derived disk quota.
	diskQuotaShare = 10
)

// HostDefaults are the derived limits: MemoryMax a quarter of the host's
// memory, at most 4GiB; TasksMax 4096, or pid_max/8 if less; DiskQuota a
// tenth of the size of the filesystem at pool (0 when it cannot be
// measured: a ZFS dataset's name, say).
func HostDefaults(pool string) (memoryMax, tasksMax, diskQuota uint64) {
	memoryMax = maxDefaultMemory
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) == nil {
		memoryMax = min(memoryMax, uint64(si.Totalram)*uint64(si.Unit)/4)
	}
	tasksMax = defaultTasksMax
	if b, err := os.ReadFile("/proc/sys/kernel/pid_max"); err == nil {
		if n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err == nil && n/8 > 0 {
			tasksMax = min(tasksMax, n/8)
		}
	}
	var st unix.Statfs_t
	if filepath.IsAbs(pool) && unix.Statfs(pool, &st) == nil {
		diskQuota = st.Blocks * uint64(st.Bsize) / diskQuotaShare
	}
	return memoryMax, tasksMax, diskQuota
}

// applyHostDefaults gives opts the derived limits it still lacks, after
// its profile and the policy had their say. Under a cap on the memory
// promised (limits.max_memory, on by default) the derived MemoryMax
// counts against it like any other.
func (s *Supervisor) applyHostDefaults(opts *CreateOptions) {
	memoryMax, tasksMax, diskQuota := HostDefaults(s.cfg.Backend.Info().Root)
	if opts.Limits.MemoryMax == nil {
		if h := opts.Limits.MemoryHigh; h != nil && *h > memoryMax {
			memoryMax = *h // a throttling point asked for stays below the cap
		}
		opts.Limits.MemoryMax = &memoryMax
	}
	if opts.Limits.TasksMax == nil {
		opts.Limits.TasksMax = &tasksMax
	}
	if opts.DiskQuota == 0 {
		opts.DiskQuota = diskQuota
	}
}
