// Package unitsfake is an in-memory fake of systemd as the supervisor
// asks it (supervisor.Units, which *units.Manager is), for tests of the
// supervisor's rooms that run without root or a private systemd.
//
// It keeps the units it was asked to make and what was done to them:
// scopes started, stopped, frozen and thawed, with their spec and state;
// slices' limits, and the slices a scope's placement loads; the mount
// units of BindMount and PoolMount; services stopped and started (a test
// adds them with AddService, and their environment); which unit a pid is
// of (a scope's pids, or SetPIDUnit). It refuses what units refuses
// before asking systemd (names, specs, limits) with the same errors, and
// answers with units' sentinels where systemd's answer maps to one
// (units.ErrExists, units.ErrNotFound). Every call is logged (Calls), and
// Fail and SetHook make calls fail on purpose. It is safe for concurrent
// use.
//
// What it does not do: no process is moved, frozen or signalled, no
// cgroup or unit file is made, no limit is enforced; usage is what a test
// set (SetUsage), and a unit's life outside the calls (a scope failing at
// its RuntimeMax, its processes ending) is what a test makes it
// (SetState, End). Kill and Watch, which the supervisor does not use
// through its seam, are not faked.
package unitsfake
