package units

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// memoryCgroup is the cgroup that accounts a process's memory.
type memoryCgroup struct {
	// dir is its directory under cgroupRoot.
	dir string
	// legacy is true for a cgroup v1 memory controller (memory.oom_control,
	// memory.max_usage_in_bytes), false for cgroup v2 (memory.events,
	// memory.peak).
	legacy bool
}

// file is the path of one of the cgroup's files, chosen by hierarchy.
func (c memoryCgroup) file(legacy, unified string) string {
	if c.legacy {
		return filepath.Join(c.dir, legacy)
	}
	return filepath.Join(c.dir, unified)
}

// memoryCgroupOf finds the memory cgroup of process pid (for a process of
// a scope, the scope's): the v1 memory controller's where the machine
// mounts one (legacy and hybrid layouts, /sys/fs/cgroup/memory/...),
// otherwise its cgroup v2 where that has the memory controller (unified
// layout). A process in no cgroup that accounts memory is ErrUnsupported.
func memoryCgroupOf(pid int) (memoryCgroup, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return memoryCgroup{}, fmt.Errorf("reading the cgroup of pid %d: %w", pid, err)
	}
	var unified, legacy string
	for line := range strings.Lines(string(data)) {
		// hierarchy-ID:controller-list:cgroup-path
		parts := strings.SplitN(strings.TrimSuffix(line, "\n"), ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			unified = parts[2]
		}
		for c := range strings.SplitSeq(parts[1], ",") {
			if c == "memory" {
				legacy = parts[2]
			}
		}
	}
	if legacy != "" {
		return memoryCgroup{dir: filepath.Join(cgroupRoot, "memory", filepath.Clean("/"+legacy)), legacy: true}, nil
	}
	if unified != "" {
		// cgroup v2 is at the root on a unified layout, under unified/ on a
		// hybrid one (where it has no controllers, as a rule). Only a
		// cgroup with the memory controller has memory.current.
		for _, root := range []string{cgroupRoot, cgroupRoot + "/unified"} {
			dir := filepath.Join(root, filepath.Clean("/"+unified))
			if _, err := os.Stat(filepath.Join(dir, "memory.current")); err == nil {
				return memoryCgroup{dir: dir}, nil
			}
		}
	}
	return memoryCgroup{}, fmt.Errorf("pid %d has no memory cgroup: %w", pid, ErrUnsupported)
}

// MemoryPeak is the most memory the memory cgroup of process pid (its
// scope) has used at once since the cgroup was made, in bytes, page cache
// included: it outlasts the memory, once freed. systemd 252 has no
// MemoryPeak property; the kernel counts it, in memory.max_usage_in_bytes
// on a v1 memory controller and in memory.peak on cgroup v2 (Linux 5.19
// on; before, ErrUnsupported).
func MemoryPeak(pid int) (uint64, error) {
	cg, err := memoryCgroupOf(pid)
	if err != nil {
		return 0, err
	}
	path := cg.file("memory.max_usage_in_bytes", "memory.peak")
	b, err := os.ReadFile(path)
	if err != nil {
		// A cgroup that is still there without the file: a kernel before
		// 5.19. One that went away (its scope ended) is no such thing.
		if errors.Is(err, fs.ErrNotExist) && !cg.legacy {
			if _, serr := os.Stat(cg.dir); serr == nil {
				return 0, fmt.Errorf("reading the memory peak of pid %d: %s is missing (Linux 5.19 has it): %w", pid, path, ErrUnsupported)
			}
		}
		return 0, fmt.Errorf("reading the memory peak of pid %d: %w", pid, err)
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("reading the memory peak of pid %d: %s: %w", pid, path, err)
	}
	return n, nil
}
