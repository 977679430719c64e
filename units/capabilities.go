package units

import (
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Layout is how the machine mounts cgroups.
type Layout string

const (
	// Unified: cgroup v2 only, at /sys/fs/cgroup.
	Unified Layout = "unified"
	// Hybrid: cgroup v1 controllers at /sys/fs/cgroup/<controller>, and
	// v2 (no controllers, used by systemd to track processes) at
	// /sys/fs/cgroup/unified.
	Hybrid Layout = "hybrid"
	// Legacy: cgroup v1 only.
	Legacy Layout = "legacy"
)

// FreezeMethod is how Freeze stops a scope's processes.
type FreezeMethod string

const (
	// FreezeCgroup: systemd's FreezeUnit, the cgroup v2 freezer. The
	// processes cannot tell; new processes of the scope are frozen too.
	FreezeCgroup FreezeMethod = "cgroup"
	// FreezeSignals: SIGSTOP to every process of the scope, and SIGCONT to
	// thaw, because systemd refuses FreezeUnit without cgroup v2
	// controllers ("Unit ... does not support freezing" on a hybrid
	// layout, systemd 252). Unlike the freezer, a parent inside the scope
	// can see its children stop (waitpid WUNTRACED), thaw also resumes a
	// process that was stopped before Freeze, and a signal other than
	// SIGKILL sent to a frozen scope waits until Thaw.
	FreezeSignals FreezeMethod = "signals"
)

// Capabilities describe, as data, what differs between machines: what
// systemd and the cgroup layout let this package do. Connect fills them.
type Capabilities struct {
	// Layout is the cgroup layout systemd runs on.
	Layout Layout
	// SystemdVersion is systemd's major version (252), 0 when unknown.
	SystemdVersion int
	// Freeze is how Freeze and Thaw work here.
	Freeze FreezeMethod
	// MemoryHigh, MemorySwapMax and IOWeight say whether the kernel
	// enforces those limits. Without cgroup v2 controllers systemd accepts
	// them and shows them (they read back in Usage.Limits) but nothing
	// applies them: cgroup v1 has no memory.high nor a swap-only limit,
	// and IOWeight needs v1's blkio.weight, which went with the CFQ
	// scheduler (Linux 5.0). MemoryMax, TasksMax, CPUQuota, CPUWeight and
	// RuntimeMax hold on every layout.
	MemoryHigh, MemorySwapMax, IOWeight bool
}

// cgroupRoot is where the kernel's cgroup filesystems are mounted.
const cgroupRoot = "/sys/fs/cgroup"

// detectLayout reads the cgroup layout from the filesystems mounted at
// cgroupRoot, the way systemd decides it.
func detectLayout() Layout {
	if isCgroup2(cgroupRoot) {
		return Unified
	}
	if isCgroup2(cgroupRoot + "/unified") {
		return Hybrid
	}
	return Legacy
}

func isCgroup2(path string) bool {
	var st unix.Statfs_t
	return unix.Statfs(path, &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC
}

// unifiedRoot is where the cgroup v2 hierarchy is mounted ("" on Legacy).
func (c Capabilities) unifiedRoot() string {
	switch c.Layout {
	case Unified:
		return cgroupRoot
	case Hybrid:
		return cgroupRoot + "/unified"
	}
	return ""
}

// capabilitiesFor describes what a systemd of the given version can do on
// layout.
func capabilitiesFor(layout Layout, version int) Capabilities {
	c := Capabilities{Layout: layout, SystemdVersion: version, Freeze: FreezeSignals}
	if layout == Unified {
		c.MemoryHigh, c.MemorySwapMax, c.IOWeight = true, true, true
		// FreezeUnit came with systemd 246. An unknown version gets the
		// benefit of the doubt: Freeze falls back to signals anyway if
		// systemd refuses.
		if version == 0 || version >= 246 {
			c.Freeze = FreezeCgroup
		}
	} else {
		_, err := os.Stat(cgroupRoot + "/blkio/blkio.weight")
		c.IOWeight = err == nil
	}
	return c
}

// parseVersion takes the major version from systemd's Version property as
// go-systemd returns it (`"252.38-1~deb12u1"`, quotes included).
func parseVersion(v string) int {
	v = strings.Trim(v, `"`)
	end := 0
	for end < len(v) && '0' <= v[end] && v[end] <= '9' {
		end++
	}
	n, err := strconv.Atoi(v[:end])
	if err != nil {
		return 0
	}
	return n
}
