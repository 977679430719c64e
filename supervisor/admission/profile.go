package admission

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

// Profiles are the host's: the profiles by name, the one a create that
// names none gets ("": none, the defaults of Profile), and the host paths
// hidden from and read-only in every sandbox.
type Profiles struct {
	Named            map[string]Profile
	Default          string
	Hidden, ReadOnly []string
}

// Resolve fills what r leaves unset from its profile (the default one
// when it names none) and checks the network settings.
func (ps Profiles) Resolve(r *Request) error {
	if r.Profile == "" {
		r.Profile = ps.Default
	}
	var p Profile
	if r.Profile != "" {
		var ok bool
		if p, ok = ps.Named[r.Profile]; !ok {
			names := make([]string, 0, len(ps.Named))
			for n := range ps.Named {
				names = append(names, n)
			}
			slices.Sort(names)
			return fmt.Errorf("profile %q is not configured (there are: %v): %w", r.Profile, names, ErrInvalid)
		}
	}
	switch {
	case r.Network == "" && len(r.Allow) > 0:
		r.Network = nsinit.NetworkAllowlist // an allowlist given is the network asked for
	case r.Network == "":
		r.Network, r.Allow = p.Network, p.Allow
	}
	if r.Network == "" {
		r.Network = nsinit.NetworkNone
	}
	switch r.Network {
	case nsinit.NetworkNone, nsinit.NetworkHost:
		if len(r.Allow) > 0 {
			return fmt.Errorf("an allowlist is given but the network is %q: %w", r.Network, ErrInvalid)
		}
	case nsinit.NetworkAllowlist:
		if len(r.Allow) == 0 {
			return fmt.Errorf("the network is an allowlist with nothing in it (use %q for no network): %w", nsinit.NetworkNone, ErrInvalid)
		}
		if _, err := egress.ParseAllowlist(r.Allow); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalid, err)
		}
	default:
		return fmt.Errorf("network %q: want %q, %q or %q: %w", r.Network,
			nsinit.NetworkNone, nsinit.NetworkAllowlist, nsinit.NetworkHost, ErrInvalid)
	}
	mergeLimits(&r.Limits, p.Limits)
	if r.DiskQuota == 0 {
		r.DiskQuota = p.DiskQuota
	}
	if r.TTL == 0 {
		r.TTL = p.TTL
	}
	if r.ReadOnlyProject == nil {
		r.ReadOnlyProject = &p.ReadOnlyProject
	}
	r.Hidden = union(ps.Hidden, p.Hidden)
	r.ReadOnly = union(ps.ReadOnly, p.ReadOnly)
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
	// defaultTasksMax is the derived TasksMax, unless pid_max/8 is less:
	// sandboxd1.DefaultTasksMax, which sandboxctl's help says (this room
	// may not import the wire contract; its test holds the two equal).
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

// ApplyHostDefaults gives r the derived limits (HostDefaults) it still
// lacks, after its profile and the policy had their say. Under a cap on
// the memory promised (limits.max_memory, on by default) the derived
// MemoryMax counts against it like any other.
func ApplyHostDefaults(r *Request, memoryMax, tasksMax, diskQuota uint64) {
	if r.Limits.MemoryMax == nil {
		if h := r.Limits.MemoryHigh; h != nil && *h > memoryMax {
			memoryMax = *h // a throttling point asked for stays below the cap
		}
		r.Limits.MemoryMax = &memoryMax
	}
	if r.Limits.TasksMax == nil {
		r.Limits.TasksMax = &tasksMax
	}
	if r.DiskQuota == 0 {
		r.DiskQuota = diskQuota
	}
}
