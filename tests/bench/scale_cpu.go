package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// cpuTicks is where the machine's CPU time went up to a moment, in clock
// ticks: all of it, the idle part, and that of systemd (the testbed's pid
// 1) and of the daemon, each process's own (utime+stime).
type cpuTicks struct {
	total, idle, systemd, daemon uint64
}

func readCPU(daemonPID int) (c cpuTicks, err error) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return c, err
	}
	line, _, _ := strings.Cut(string(data), "\n")
	f := strings.Fields(line)
	for i, v := range f[1:] {
		n, _ := strconv.ParseUint(v, 10, 64)
		c.total += n
		if i == 3 || i == 4 { // idle, iowait
			c.idle += n
		}
	}
	if c.systemd, err = procTicks(1); err != nil {
		return c, err
	}
	c.daemon, err = procTicks(daemonPID)
	return c, err
}

// procTicks is a process's utime+stime.
func procTicks(pid int) (uint64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The fields after the command (which may hold spaces) in brackets.
	s := string(data)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(f) < 13 {
		return 0, fmt.Errorf("reading /proc/%d/stat: %q", pid, s)
	}
	u, _ := strconv.ParseUint(f[11], 10, 64)
	k, _ := strconv.ParseUint(f[12], 10, 64)
	return u + k, nil
}

// cpuShare says how busy the machine was between a and b, and how much of
// the busy time was systemd's, the daemon's, and everything else's (the
// kernel's work for them, the inits, the bench).
func cpuShare(a, b cpuTicks) string {
	total := float64(b.total - a.total)
	busy := total - float64(b.idle-a.idle)
	if total <= 0 || busy <= 0 {
		return "no CPU time measured"
	}
	sd, dd := float64(b.systemd-a.systemd), float64(b.daemon-a.daemon)
	return fmt.Sprintf("CPUs %.0f%% busy, of which systemd %.0f%%, sandboxd %.0f%%, the rest %.0f%%",
		100*busy/total, 100*sd/busy, 100*dd/busy, 100*(busy-sd-dd)/busy)
}

// clockTick is the kernel's USER_HZ, the unit of /proc/stat's times
// (100 on every Linux that runs the bench).
const clockTick = 10 * time.Millisecond

// busyPer is the CPU time the whole machine spent busy between a and b,
// per call of n.
func busyPer(a, b cpuTicks, n int) time.Duration {
	busy := (b.total - a.total) - (b.idle - a.idle)
	return time.Duration(busy) * clockTick / time.Duration(max(n, 1))
}
