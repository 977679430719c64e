package units

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// OOMKills is how many processes the kernel's OOM killer has killed in
// the memory cgroup of process pid (its scope), so that a SIGKILL can be
// told to be the memory limit's. systemd does not count these for a
// scope; the cgroup does: memory.events on the unified hierarchy,
// memory.oom_control on a legacy memory controller.
func OOMKills(pid int) (uint64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return 0, fmt.Errorf("reading the cgroup of pid %d: %w", pid, err)
	}
	defer f.Close()
	var unified, legacy string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// hierarchy-ID:controller-list:cgroup-path
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			unified = parts[2]
		}
		for _, c := range strings.Split(parts[1], ",") {
			if c == "memory" {
				legacy = parts[2]
			}
		}
	}
	if legacy != "" {
		return counter(filepath.Join("/sys/fs/cgroup/memory", legacy, "memory.oom_control"), "oom_kill")
	}
	if unified != "" {
		for _, root := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
			if n, err := counter(filepath.Join(root, unified, "memory.events"), "oom_kill"); err == nil {
				return n, nil
			}
		}
	}
	return 0, fmt.Errorf("pid %d has no memory cgroup: %w", pid, ErrUnsupported)
}

// counter reads "key N" from a cgroup file of such lines.
func counter(path, key string) (uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, key+" "); ok {
			return strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, fmt.Errorf("%s has no %s", path, key)
}
