package units

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Amount is a number systemd may not know: accounting off, a controller
// the cgroup layout lacks, or a scope that just ended. systemd says so with
// 2^64-1, which would otherwise read as 16 EiB.
type Amount struct {
	Value uint64
	Known bool
}

func (a Amount) String() string {
	if !a.Known {
		return "unknown"
	}
	return strconv.FormatUint(a.Value, 10)
}

func amount(v any) Amount {
	n, ok := v.(uint64)
	return Amount{Value: n, Known: ok && n != unset}
}

// Usage is what a scope uses now, and the limits it runs under.
type Usage struct {
	// ActiveState and SubState are systemd's: "active"/"running",
	// "deactivating"/"stop-sigterm", "failed"/"failed", ...
	ActiveState, SubState string
	// Result is how the scope ended, or "success" while it runs:
	// "timeout" (RuntimeMax, or a stop that needed SIGKILL), "oom-kill",
	// "resources".
	Result string
	// Memory is the memory the scope's processes use, in bytes
	// (MemoryCurrent), page cache included.
	Memory Amount
	// CPU is the CPU time its processes used, in nanoseconds
	// (CPUUsageNSec).
	CPU Amount
	// Tasks is how many processes and threads it holds (TasksCurrent).
	Tasks Amount
	// Limits are the limits in force, as systemd reports them (including
	// its defaults, such as DefaultTasksMax).
	Limits Limits
}

// Usage reads the scope's live usage and limits from its unit properties.
// A scope that is not loaded gives ErrNotFound.
func (m *Manager) Usage(ctx context.Context, name string) (Usage, error) {
	const op = "reading usage of scope"
	if err := CheckScopeName(name); err != nil {
		return Usage{}, fmt.Errorf("%s %s: %w", op, name, err)
	}
	// The Unit properties first: asking for a unit that is not loaded
	// makes systemd load an empty one just to answer, which says
	// LoadState "not-found" rather than failing.
	unit, err := m.conn.GetUnitPropertiesContext(ctx, name)
	if err != nil {
		return Usage{}, wrap(op, name, err)
	}
	if state, _ := unit["LoadState"].(string); state != "loaded" {
		return Usage{}, fmt.Errorf("%s %s: %w (load state %q)", op, name, ErrNotFound, state)
	}
	scope, err := m.conn.GetUnitTypePropertiesContext(ctx, name, "Scope")
	if err != nil {
		return Usage{}, wrap(op, name, err)
	}
	u := Usage{
		Memory: amount(scope["MemoryCurrent"]),
		CPU:    amount(scope["CPUUsageNSec"]),
		Tasks:  amount(scope["TasksCurrent"]),
		Limits: limitsFrom(scope),
	}
	u.ActiveState, _ = unit["ActiveState"].(string)
	u.SubState, _ = unit["SubState"].(string)
	u.Result, _ = scope["Result"].(string)
	if !u.CPU.Known {
		cgroup, _ := scope["ControlGroup"].(string)
		u.CPU = m.cpuFromCgroup(cgroup)
	}
	return u, nil
}

// cpuFromCgroup reads a cgroup's CPU time from cgroup v2's cpu.stat. On a
// hybrid layout systemd reads CPU time from the v1 cpuacct controller
// only, which some machines do not give it (here cpu and cpuacct are
// mounted apart, and systemd reports CPUUsageNSec unset), while the v2
// hierarchy it tracks processes in counts CPU time for every cgroup.
func (m *Manager) cpuFromCgroup(cgroup string) Amount {
	root := m.caps.unifiedRoot()
	if root == "" || cgroup == "" {
		return Amount{}
	}
	f, err := os.Open(filepath.Join(root, filepath.Clean("/"+cgroup), "cpu.stat"))
	if err != nil {
		return Amount{}
	}
	defer f.Close()
	lines := bufio.NewScanner(f)
	for lines.Scan() {
		if v, ok := strings.CutPrefix(lines.Text(), "usage_usec "); ok {
			usec, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				return Amount{}
			}
			return Amount{Value: usec * 1000, Known: true}
		}
	}
	return Amount{}
}
