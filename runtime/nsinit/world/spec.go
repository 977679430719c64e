// Package world builds a sandbox's world inside its init's new
// namespaces, before the init serves anything: the overlay root (of the
// host's `/`, or of the daemon's idmapped mounts in a user namespace),
// the project, private /proc, /dev, /sys, /tmp and /run, the host paths
// hidden or read-only, the owner's cache, a booted sandbox's console,
// log directories and snakeoil pair; then it pivots into it. Spec is
// what the daemon asks for (nsinit.Spec is this one).
package world

import (
	"os"
	"slices"
)

// Network modes of a sandbox.
const (
	// NetworkNone: a network namespace with only loopback.
	NetworkNone = "none"
	// NetworkAllowlist: like none, and the daemon serves a filtering
	// proxy on the sandbox's loopback (see runtime/egress).
	NetworkAllowlist = "allowlist"
	// NetworkHost: the host's own network namespace.
	NetworkHost = "host"
)

// Spec is the world an init builds. Paths are as the daemon sees them.
type Spec struct {
	ID       string `json:"id"`
	Hostname string `json:"hostname"`
	// Dir is the sandbox's runtime directory: the new root is mounted on
	// Dir/root and the control socket is Dir/control.
	Dir string `json:"dir"`
	// Layer holds the sandbox's system layer: writes to /usr, /etc, ...
	// go to Layer/upper. Empty: the layer is a tmpfs of LayerSize bytes
	// (for pools that cannot carry an overlay's upper layer, zfs-fuse).
	Layer     string `json:"layer,omitempty"`
	LayerSize uint64 `json:"layer_size,omitempty"`
	// ScratchSize bounds each of /tmp, /run and /dev/shm, in bytes (0: a
	// sixteenth of the host's memory, at most 1GiB; see ScratchSizeFor).
	ScratchSize uint64 `json:"scratch_size,omitempty"`
	// Project is the sandbox's copy of the project (Source), seen at the
	// project's own path (Target). A project of several directories
	// (ProjectDirs) is seen, instead, as each of them at its own path,
	// which is also where the volume holds it (projectdirs.go).
	Project     Bind     `json:"project"`
	ProjectDirs []string `json:"project_dirs,omitempty"`
	// Hidden host paths are replaced by an empty directory or file;
	// ReadOnly ones are seen but cannot be changed.
	Hidden   []string `json:"hidden,omitempty"`
	ReadOnly []string `json:"readonly,omitempty"`
	Network  string   `json:"network"`
	// UserNS: the init is root of a user namespace of its own, and builds
	// its world from the idmapped mounts that came with the spec (Lowers
	// of the host root's layers, top first, then the system layer's
	// volume, then the project) instead of the paths above.
	UserNS bool `json:"userns,omitempty"`
	Lowers int  `json:"lowers,omitempty"`
	// Cache is the owner's cache volume (its host path, "": none), seen
	// read-write at CachePath by every sandbox of that owner. In a user
	// namespace it comes idmapped instead, as the last descriptor, which
	// CacheFD says is there.
	Cache   string `json:"cache,omitempty"`
	CacheFD bool   `json:"cache_fd,omitempty"`
	// Boot: the sandbox runs a systemd of its own (runtime/nsinit/boot;
	// booted.go here), in payload/ of its scope's cgroup, whose
	// cgroup.procs Payload is (opened by the daemon for writing; it
	// travels as the last descriptor). Only in a user namespace. LogDirs
	// are made in its (hidden) /var/log.
	Boot    bool     `json:"boot,omitempty"`
	LogDirs []Dir    `json:"log_dirs,omitempty"`
	Payload *os.File `json:"-"`
	// StateDirs are the host's directories a sandbox in a user namespace
	// cannot read (a service's 0700 state), made empty in its layer
	// (makeStateDirs).
	StateDirs []Dir `json:"state_dirs,omitempty"`
}

// CachePath is where a sandbox sees its owner's cache volume (pip, npm,
// Go, cargo).
const CachePath = "/var/cache/sandbox"

// Bind is a host directory seen at another path inside the sandbox.
type Bind struct {
	Source   string `json:"source"`
	Target   string `json:"target"`
	ReadOnly bool   `json:"readonly,omitempty"`
}

// Mounts are the idmapped mounts an init in a user namespace builds its
// world from (detached, made by the daemon): the host root's layers, top
// first, its system layer's volume (which holds upper/ and work/) and its
// copy of the project; and its owner's cache volume, if it has one.
type Mounts struct {
	Lowers  []*os.File
	Layer   *os.File
	Project *os.File
	Cache   *os.File
	// CacheErr says why Cache is nil though a cache was asked for: the
	// sandbox is made without one.
	CacheErr error
}

// Close closes the descriptors (the init has its own copies once the
// daemon's nsinit.Init.Build has sent them).
func (m *Mounts) Close() {
	if m == nil {
		return
	}
	closeAll(m.Files())
}

// Files are the descriptors, in the order they travel with the spec.
func (m *Mounts) Files() []*os.File {
	fs := append(slices.Clone(m.Lowers), m.Layer, m.Project)
	if m.Cache != nil {
		fs = append(fs, m.Cache)
	}
	return fs
}

func closeAll(files []*os.File) {
	for _, f := range files {
		if f != nil {
			f.Close()
		}
	}
}
