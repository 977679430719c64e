package client

import (
	"context"
	"fmt"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/sandboxd/sandboxd/sandboxd1"
)

// Sandbox is a handle on one sandbox: Create makes one, Client.Sandbox
// finds one. Its methods act on the sandbox over the bus; the handle
// keeps no live state of the sandbox's (Entry is what the listing said).
type Sandbox struct {
	c                 *Client
	id, name, project string
	entry             sandboxd1.ListEntry // as found (zero: made by Create)
}

// Entry is the sandbox's entry in ListSandboxes as it was when Sandbox
// found it (its state and owner then); a sandbox Create made has its id,
// name and project only.
func (s *Sandbox) Entry() sandboxd1.ListEntry {
	e := s.entry
	e.ID, e.Name, e.Project = s.id, s.name, s.project
	return e
}

// ID is the sandbox's id: 12 lowercase hex digits.
func (s *Sandbox) ID() string { return s.id }

// Name is the name the sandbox was made with; "" when it has none.
func (s *Sandbox) Name() string { return s.name }

// Project is the project the sandbox is a copy of.
func (s *Sandbox) Project() string { return s.project }

// label names the sandbox in errors: its name, or its id.
func (s *Sandbox) label() string {
	if s.name != "" {
		return "sandbox " + s.name
	}
	return "sandbox " + s.id
}

func (s *Sandbox) call(ctx context.Context, op, method string, args []any, out ...any) error {
	return call(ctx, s.c.object(s.id), op+" "+s.label(), sandboxd1.SandboxInterface, method, args, out...)
}

// Networks a sandbox may have (CreateOptions.Network).
const (
	NetworkNone      = "none"      // only its own loopback
	NetworkAllowlist = "allowlist" // only what Allow lists, through the daemon's proxy
	NetworkHost      = "host"      // the host's network (audited)
)

// CreateOptions are a new sandbox's settings; the zero value of each
// leaves it to the sandbox's profile and the daemon's defaults.
type CreateOptions struct {
	// Name names the sandbox, unique on the host: letters, digits, "-",
	// "_" and ".", not starting with "." or "-", at most 100 bytes.
	Name string
	// Profile is the profile whose settings fill what these leave out
	// (default, untrusted, trusted, or one of sandboxd.toml's).
	Profile string
	// Network is NetworkNone, NetworkAllowlist or NetworkHost.
	Network string
	// Allow lists what NetworkAllowlist lets through: "host:port",
	// "*.example.com:443", "10.0.0.0/8:*".
	Allow []string
	// MemoryMax is the hard memory limit (at least
	// sandboxd1.MinMemoryMax); MemoryHigh the point where it is
	// throttled.
	MemoryMax, MemoryHigh sandboxd1.Size
	// MemorySwapMax is the swap it may use: nil is the profile's, 0 none.
	MemorySwapMax *sandboxd1.Size
	// TasksMax bounds its processes and threads at once.
	TasksMax uint64
	// CPUWeight and IOWeight are its shares of contended CPU and block
	// IO, 1..10000 (systemd's default 100).
	CPUWeight, IOWeight uint64
	// CPUQuota bounds its CPU time: "50%" is half of one CPU.
	CPUQuota sandboxd1.CPUQuota
	// RuntimeMax bounds how long its scope may run.
	RuntimeMax time.Duration
	// DiskQuota bounds the bytes it may write.
	DiskQuota sandboxd1.Size
	// TTL is its time to live: the daemon destroys it after that.
	TTL time.Duration
	// ReadOnlyProject: it sees its project but cannot change it.
	ReadOnlyProject bool
	// Boot: it runs a systemd of its own, on which `systemctl start`
	// starts the host's services on its copies of their files (see
	// Sandbox.System). It needs a user namespace and a network of its own.
	Boot bool
}

// options are o as CreateSandbox's a{sv} (Try's too).
func (o CreateOptions) options() map[string]dbus.Variant {
	m := map[string]dbus.Variant{}
	set := func(name string, v any, ok bool) {
		if ok {
			m[name] = dbus.MakeVariant(v)
		}
	}
	set(sandboxd1.OptName, o.Name, o.Name != "")
	set(sandboxd1.OptProfile, o.Profile, o.Profile != "")
	set(sandboxd1.OptNetwork, o.Network, o.Network != "")
	set(sandboxd1.OptAllow, o.Allow, len(o.Allow) > 0)
	set(sandboxd1.OptMemoryMax, uint64(o.MemoryMax), o.MemoryMax > 0)
	set(sandboxd1.OptMemoryHigh, uint64(o.MemoryHigh), o.MemoryHigh > 0)
	if o.MemorySwapMax != nil {
		set(sandboxd1.OptMemorySwapMax, uint64(*o.MemorySwapMax), true)
	}
	set(sandboxd1.OptTasksMax, o.TasksMax, o.TasksMax > 0)
	set(sandboxd1.OptCPUWeight, o.CPUWeight, o.CPUWeight > 0)
	set(sandboxd1.OptIOWeight, o.IOWeight, o.IOWeight > 0)
	set(sandboxd1.OptCPUQuotaPerSecUSec, o.CPUQuota.PerSecUSec(), o.CPUQuota > 0)
	set(sandboxd1.OptRuntimeMaxUSec, micros(o.RuntimeMax), o.RuntimeMax > 0)
	set(sandboxd1.OptDiskQuota, uint64(o.DiskQuota), o.DiskQuota > 0)
	set(sandboxd1.OptTTLUSec, micros(o.TTL), o.TTL > 0)
	set(sandboxd1.OptReadOnlyProject, true, o.ReadOnlyProject)
	set(sandboxd1.OptBoot, true, o.Boot)
	return m
}

// micros is d in whole microseconds, the bus's unit; at least 1 for any
// d above 0, so that a short duration is not taken for none.
func micros(d time.Duration) uint64 {
	if d <= 0 {
		return 0
	}
	return max(uint64(d.Microseconds()), 1)
}

// fromMicros is a time the bus gives in µs since the epoch; 0 is none.
func fromMicros(us uint64) time.Time {
	if us == 0 {
		return time.Time{}
	}
	return time.UnixMicro(int64(us))
}

// Create makes a sandbox of project, owned by the caller, and returns
// once it is ready.
func (c *Client) Create(ctx context.Context, project string, opts CreateOptions) (*Sandbox, error) {
	var id string
	var object dbus.ObjectPath
	err := c.callManager(ctx, fmt.Sprintf("creating a sandbox of project %q", project), sandboxd1.MethodCreateSandbox,
		[]any{project, opts.options()}, &id, &object)
	if err != nil {
		return nil, err
	}
	return &Sandbox{c: c, id: id, name: opts.Name, project: project}, nil
}

// Destroy stops the sandbox's processes and deletes its files and its
// record.
func (s *Sandbox) Destroy(ctx context.Context) error {
	return s.call(ctx, "destroying", sandboxd1.MethodDestroy, nil)
}

// Freeze stops every process of the sandbox until Thaw; its files and
// limits stay.
func (s *Sandbox) Freeze(ctx context.Context) error {
	return s.call(ctx, "freezing", sandboxd1.MethodFreeze, nil)
}

// Thaw lets a frozen sandbox's processes run again.
func (s *Sandbox) Thaw(ctx context.Context) error {
	return s.call(ctx, "thawing", sandboxd1.MethodThaw, nil)
}

// System is a booted sandbox's systemd's state ("running", "degraded",
// "starting", "offline" once it has ended...) and its failed units.
// ErrWrongState for a sandbox made without Boot.
func (s *Sandbox) System(ctx context.Context) (state string, failed []string, err error) {
	err = s.call(ctx, "reading the system of", sandboxd1.MethodSystemStatus, nil, &state, &failed)
	return state, failed, err
}

// Stop ends the sandbox's processes and keeps it: its files,
// checkpoints, ports and the processes spawned with Restart stay, its
// state is "stopped" across the daemon's restarts and the host's
// reboots, and calls that need it running fail with ErrStopped until
// Start. Stop of a stopped sandbox does nothing.
func (s *Sandbox) Stop(ctx context.Context) error {
	return s.call(ctx, "stopping", sandboxd1.MethodStop, nil)
}

// Start runs a stopped sandbox again: a booted one boots, and the
// processes spawned with Restart start again. Start of a running
// sandbox does nothing.
func (s *Sandbox) Start(ctx context.Context) error {
	return s.call(ctx, "starting", sandboxd1.MethodStart, nil)
}
