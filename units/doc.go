// Package units runs sandboxes as transient systemd units over the system
// bus: a sandbox-<id>.scope per sandbox, with its CPU, memory, tasks, IO and
// runtime limits, its live usage, and its end.
//
// It wraps go-systemd's D-Bus binding. A Manager is one connection to
// systemd:
//
//	m, err := units.Connect(ctx)
//	...
//	defer m.Close()
//	err = m.StartScope(ctx, units.Scope{
//		Name:   "sandbox-1f3a.scope",
//		PIDs:   []int{pid},
//		Limits: units.Limits{MemoryMax: new(uint64(512 << 20)), TasksMax: new(uint64(200))},
//	})
//	u, err := m.Usage(ctx, "sandbox-1f3a.scope")   // memory, CPU, tasks, limits
//	err = m.Freeze(ctx, "sandbox-1f3a.scope")      // and Thaw, Kill, Stop, ResetFailed
//	all, err := m.List(ctx, "sandbox-*.scope")     // what exists, at start
//	events, err := m.Watch(ctx, "sandbox-*.scope") // what changes, until ctx ends
//
// Every call waits for systemd: StartScope and Stop for their job's result
// (anything but "done" is a *JobError). Errors say what was done to which
// unit and wrap the sentinels of errors.go.
//
// What the machine allows differs (Capabilities): on a hybrid cgroup layout
// (v1 controllers, v2 only at /sys/fs/cgroup/unified) systemd cannot freeze,
// so Freeze sends SIGSTOP, and MemoryHigh, MemorySwapMax and IOWeight are
// accepted but not enforced.
package units
