package units

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// OOMKills is how many processes the kernel's OOM killer has killed in
// the memory cgroup of process pid (its scope), so that a SIGKILL can be
// told to be the memory limit's. systemd does not count these for a
// scope; the cgroup does: memory.events on the unified hierarchy,
// memory.oom_control on a legacy memory controller.
func OOMKills(pid int) (uint64, error) {
	cg, err := memoryCgroupOf(pid)
	if err != nil {
		return 0, err
	}
	n, err := counter(cg.file("memory.oom_control", "memory.events"), "oom_kill")
	if err != nil {
		return 0, fmt.Errorf("reading the OOM kills of pid %d: %w", pid, err)
	}
	return n, nil
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
