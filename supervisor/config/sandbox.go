package config

import (
	"maps"
	"slices"
	"time"
)

// Sandbox is the [sandbox] section: what every sandbox sees of the host,
// whatever its profile.
type Sandbox struct {
	// HiddenPaths are host paths that sandboxes do not see: an empty
	// directory (or an empty file, for a file) takes each one's place.
	// The calling user gets an empty private home inside whatever this
	// hides.
	HiddenPaths []string `toml:"hidden_paths"`
	// ReadonlyPaths are host paths that sandboxes see but cannot change,
	// not even in their own layer.
	ReadonlyPaths []string `toml:"readonly_paths"`
	// DefaultProfile is the profile of a create that names none: a
	// built-in one or one of the file's.
	DefaultProfile string `toml:"default_profile"`
	// UserNS is UserNSAuto, UserNSRequire or UserNSOff: whether each
	// sandbox gets a user namespace of its own (root inside, nobody on
	// the host).
	UserNS string `toml:"userns"`
	// RootLayers are the host root's filesystems, top first, that a
	// sandbox in a user namespace stacks (idmapped) under its own layer:
	// "/" for a plain root filesystem, the layers of an overlay root.
	RootLayers []string `toml:"root_layers"`
	// UserNSFirstID and UserNSIDCount are the host ids that sandboxes
	// take blocks of 65,536 from.
	UserNSFirstID uint32 `toml:"userns_first_id"`
	UserNSIDCount uint32 `toml:"userns_id_count"`
}

// Values of Sandbox.UserNS.
const (
	UserNSAuto    = "auto"
	UserNSRequire = "require"
	UserNSOff     = "off"
)

// The default host id range of user namespaces: from above the ranges
// useradd hands out in /etc/subuid (SUB_UID_MAX, 600100000) to the end
// of systemd's container range (0x6FFFFFFF). The daemon skips blocks
// that a host user, group or /etc/subuid range reaches.
const (
	DefaultUserNSFirstID = 0x24000000
	DefaultUserNSIDCount = 0x70000000 - 0x24000000
)

// Values of a profile's network.
const (
	// NetworkNone: loopback only. A profile without network has this.
	NetworkNone = "none"
	// NetworkAllowlist: egress only to the profile's allow entries,
	// through the daemon's proxy.
	NetworkAllowlist = "allowlist"
	// NetworkHost: the host's network.
	NetworkHost = "host"
)

// The built-in profiles, which exist without a [profile.NAME] in the file.
const (
	// ProfileDefault: no network, the limits of [limits] (which the
	// daemon derives from the host and the pool when they are 0).
	ProfileDefault = "default"
	// ProfileUntrusted: no network, and tight limits.
	ProfileUntrusted = "untrusted"
	// ProfileTrusted: the host's network.
	ProfileTrusted = "trusted"
)

// Profile is one [profile.NAME] table: a named set of sandbox settings
// that a create picks by name. Each field is nil when its key is not set;
// what is not set falls back to the daemon's defaults ([limits]), and a
// create's own settings override its profile's.
type Profile struct {
	// Network is NetworkNone, NetworkAllowlist or NetworkHost; see
	// NetworkMode for the value with the default applied.
	Network *string `toml:"network"`
	// Allow lists where a NetworkAllowlist profile may connect, as
	// "host:port" entries ("example.com:443", "*.example.com:*",
	// "10.0.0.0/8:80", "[::1]:8080"). It is set exactly when Network is
	// NetworkAllowlist. Config checks only that each has a ":"; the proxy
	// parses them.
	Allow []string `toml:"allow"`
	// MemoryMax caps the sandbox's memory; 0 or unset: [limits]'s
	// default.
	MemoryMax *Size `toml:"memory_max"`
	// TasksMax caps the sandbox's processes and threads; 1 or more.
	TasksMax *int `toml:"tasks_max"`
	// CPUQuota caps the sandbox's CPU time.
	CPUQuota *CPUQuota `toml:"cpu_quota"`
	// RuntimeMax bounds how long the sandbox's processes run before they
	// are stopped; 0 means no bound.
	RuntimeMax *Duration `toml:"runtime_max"`
	// DiskQuota caps what the sandbox writes to its layer; 0 or unset:
	// [limits]'s default.
	DiskQuota *Size `toml:"disk_quota"`
	// TTL is the sandbox's time to live; 0 means none.
	TTL *Duration `toml:"ttl"`
	// ReadonlyProject: the sandbox sees its copy of the project but
	// cannot change it.
	ReadonlyProject *bool `toml:"readonly_project"`
	// HiddenPaths and ReadonlyPaths are added to [sandbox]'s.
	HiddenPaths   []string `toml:"hidden_paths"`
	ReadonlyPaths []string `toml:"readonly_paths"`
}

// NetworkMode is p's network, NetworkNone when it sets none.
func (p Profile) NetworkMode() string {
	if p.Network == nil {
		return NetworkNone
	}
	return *p.Network
}

// builtinProfiles are the profiles there are without a file: fresh each
// call, so no caller shares them.
func builtinProfiles() map[string]Profile {
	return map[string]Profile{
		ProfileDefault: {Network: new(NetworkNone)},
		ProfileUntrusted: {
			Network:    new(NetworkNone),
			MemoryMax:  new(512 * MiB),
			TasksMax:   new(256),
			CPUQuota:   new(CPUQuota(100)),
			DiskQuota:  new(1 * GiB),
			TTL:        new(Duration(time.Hour)),
			RuntimeMax: new(Duration(time.Hour)),
		},
		ProfileTrusted: {Network: new(NetworkHost)},
	}
}

// Profile finds the profile called name: the file's [profile.NAME], or a
// built-in one of that name ("default", "untrusted", "trusted"), which a
// file's profile of the same name replaces whole. A tasks_max or
// disk_quota it leaves out is [limits]'s default_tasks_max or
// default_disk_quota when those are set (not 0; the daemon derives the
// rest from the host). The Profile returned is a copy: changing it
// changes nothing in c.
func (c *Config) Profile(name string) (Profile, bool) {
	p, ok := c.Profiles[name]
	if !ok {
		p, ok = builtinProfiles()[name]
	}
	if !ok {
		return Profile{}, false
	}
	p = p.clone()
	if p.TasksMax == nil && c.Limits.DefaultTasksMax > 0 {
		p.TasksMax = new(c.Limits.DefaultTasksMax)
	}
	if p.DiskQuota == nil && c.Limits.DefaultDiskQuota > 0 {
		p.DiskQuota = new(c.Limits.DefaultDiskQuota)
	}
	return p, true
}

// ProfileNames lists every profile there is, built-in or the file's, in
// order.
func (c *Config) ProfileNames() []string {
	names := builtinProfiles()
	for name := range c.Profiles {
		names[name] = Profile{}
	}
	return slices.Sorted(maps.Keys(names))
}

// HiddenPaths are the host paths a sandbox of profile p does not see:
// [sandbox]'s, then p's, each once.
func (c *Config) HiddenPaths(p Profile) []string {
	return union(c.Sandbox.HiddenPaths, p.HiddenPaths)
}

// ReadonlyPaths are the host paths a sandbox of profile p cannot change:
// [sandbox]'s, then p's, each once.
func (c *Config) ReadonlyPaths(p Profile) []string {
	return union(c.Sandbox.ReadonlyPaths, p.ReadonlyPaths)
}

func union(a, b []string) []string {
	out := make([]string, 0, len(a)+len(b))
	for _, s := range slices.Concat(a, b) {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// clone copies p, and what its fields point to.
func (p Profile) clone() Profile {
	p.Network = clonePtr(p.Network)
	p.Allow = slices.Clone(p.Allow)
	p.MemoryMax = clonePtr(p.MemoryMax)
	p.TasksMax = clonePtr(p.TasksMax)
	p.CPUQuota = clonePtr(p.CPUQuota)
	p.RuntimeMax = clonePtr(p.RuntimeMax)
	p.DiskQuota = clonePtr(p.DiskQuota)
	p.TTL = clonePtr(p.TTL)
	p.ReadonlyProject = clonePtr(p.ReadonlyProject)
	p.HiddenPaths = slices.Clone(p.HiddenPaths)
	p.ReadonlyPaths = slices.Clone(p.ReadonlyPaths)
	return p
}

func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}
