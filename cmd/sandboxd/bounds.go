package main

import (
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/supervisor/config"
	"github.com/sandboxd/sandboxd/units"
)

// machine is what [limits]' percentages are shares of: the memory, and
// the most tasks the kernel allows (the smaller of pid_max and
// threads-max, as systemd reads a TasksMax of "N%").
type machine struct{ memory, tasks uint64 }

func readMachine() machine {
	var m machine
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) == nil {
		m.memory = uint64(si.Totalram) * uint64(si.Unit)
	}
	for _, f := range []string{"/proc/sys/kernel/pid_max", "/proc/sys/kernel/threads-max"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err == nil && n > 0 && (m.tasks == 0 || n < m.tasks) {
			m.tasks = n
		}
	}
	return m
}

// bounds turns a memory and a task share into a slice's limits on m; an
// unset one (0, or a share of what could not be read) is no bound.
func (m machine) bounds(memory config.MemoryShare, tasks config.TaskShare) units.Limits {
	var l units.Limits
	if n := memory.Of(m.memory); n > 0 {
		l.MemoryMax = new(n)
	}
	if n := tasks.Of(m.tasks); n > 0 {
		l.TasksMax = new(n)
	}
	return l
}
