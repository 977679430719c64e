package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/sandboxd/sandboxd/sandboxd1"
)

// memInfo is a process's memory, in bytes.
type memInfo struct {
	rss  uint64 // VmRSS: resident pages, shared ones counted in full
	anon uint64 // RssAnon: the resident pages that are its own
	pss  uint64 // Pss: resident pages, each shared one divided among its sharers
	// threads are its OS threads: each has a stack, and a Go program
	// keeps one blocked in every wait for a child.
	threads int
}

// memory returns the daemon's pid and its memory now.
func (d *daemon) memory(ctx context.Context) (int, memInfo, error) {
	out, err := tool(ctx, "systemctl", "show", "-P", "MainPID", daemonUnit)
	if err != nil {
		return 0, memInfo{}, fmt.Errorf("finding sandboxd's pid: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil || pid == 0 {
		return 0, memInfo{}, fmt.Errorf("finding sandboxd's pid: MainPID is %q", strings.TrimSpace(out))
	}
	m, err := readMemory(pid)
	return pid, m, err
}

// initMemory is the row of the sandboxes' init processes: one sandbox's
// (the last made), and the sum over all of ids. The init is what a
// sandbox costs in memory while nothing runs in it.
func (d *daemon) initMemory(ctx context.Context, ids []string) (row, error) {
	one, all, err := d.initsMemory(ctx, ids)
	if err != nil {
		return row{}, err
	}
	return row{fs: "btrfs",
		op: fmt.Sprintf("one sandbox's `sandboxd sandbox-init` (the process that holds its scope): VmRSS %s, of which %s its own (RssAnon); Pss %s",
			mib(one.rss), mib(one.anon), mib(one.pss)),
		verdict: fmt.Sprintf("no target; all %d inits: %s Pss", len(ids), mib(all.pss)),
	}, nil
}

// initsMemory reads the memory of the init of each of ids, each found in
// its scope by asking systemd: the last one's, and the sum of all.
func (d *daemon) initsMemory(ctx context.Context, ids []string) (one, all memInfo, err error) {
	systemd := d.conn.Object("org.freedesktop.systemd1", "/org/freedesktop/systemd1")
	for _, id := range ids {
		var unit string
		if err := d.conn.Object(sandboxd1.BusName, sandboxd1.SandboxPath(id)).StoreProperty(sandboxd1.SandboxInterface+".Unit", &unit); err != nil {
			return one, all, fmt.Errorf("finding the scope of sandbox %s: %w", id, err)
		}
		var procs []struct {
			Cgroup  string
			PID     uint32
			Cmdline string
		}
		if err := systemd.CallWithContext(ctx, "org.freedesktop.systemd1.Manager.GetUnitProcesses", 0, unit).Store(&procs); err != nil {
			return one, all, fmt.Errorf("listing the processes of %s: %w", unit, err)
		}
		pid := 0
		for _, p := range procs {
			if strings.HasSuffix(p.Cmdline, " sandbox-init") {
				pid = int(p.PID)
			}
		}
		if pid == 0 {
			return one, all, fmt.Errorf("finding the init of sandbox %s: %s holds no sandbox-init (%v)", id, unit, procs)
		}
		m, err := readMemory(pid)
		if err != nil {
			return one, all, err
		}
		one = m
		all.rss += m.rss
		all.anon += m.anon
		all.pss += m.pss
	}
	return one, all, nil
}

// readMemory reads a process's memory from /proc: VmRSS, RssAnon and
// Threads from status, Pss from smaps_rollup.
func readMemory(pid int) (memInfo, error) {
	var m memInfo
	fields := map[string]*uint64{"VmRSS:": &m.rss, "RssAnon:": &m.anon, "Pss:": &m.pss}
	for _, name := range []string{"status", "smaps_rollup"} {
		path := fmt.Sprintf("/proc/%d/%s", pid, name)
		data, err := os.ReadFile(path)
		if err != nil {
			return m, fmt.Errorf("reading the memory of pid %d: %w", pid, err)
		}
		sc := bufio.NewScanner(bytes.NewReader(data))
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) == 2 && f[0] == "Threads:" {
				m.threads, _ = strconv.Atoi(f[1])
			}
			if len(f) == 3 && f[2] == "kB" && fields[f[0]] != nil {
				kb, err := strconv.ParseUint(f[1], 10, 64)
				if err != nil {
					return m, fmt.Errorf("reading %s: %q: %w", path, sc.Text(), err)
				}
				*fields[f[0]] = kb << 10
			}
		}
	}
	if m.rss == 0 || m.pss == 0 {
		return m, fmt.Errorf("reading the memory of pid %d: no VmRSS or Pss", pid)
	}
	return m, nil
}

func mib(b uint64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

func kib(b int64) string { return fmt.Sprintf("%d KiB", b>>10) }

// plusMiB is the growth from b to a: "+9.1 MiB", "-0.4 MiB".
func plusMiB(a, b uint64) string {
	return fmt.Sprintf("%+.1f MiB", (float64(a)-float64(b))/(1<<20))
}
