package client

import (
	"context"
	"fmt"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/sandboxd/sandboxd/sandboxd1"
)

// Status is what a sandbox's properties say of it (docs/dbus-api.md
// names each).
type Status struct {
	ID      string `json:"id"`
	Name    string `json:"name,omitempty"`
	Project string `json:"project"`
	// State is one of sandboxd1's State* values: ready, running,
	// frozen, stopped, ...
	State string `json:"state"`
	// Owner is the uid that made it.
	Owner   uint32    `json:"owner"`
	Created time.Time `json:"created"`
	// Expires is the end of its time to live; zero when it has none.
	Expires time.Time `json:"expires,omitzero"`
	// Path is where its copy of the project is on the host; Unit its
	// systemd scope; Base the read-only snapshot it was made from.
	Path    string `json:"path"`
	Unit    string `json:"unit"`
	Base    string `json:"base"`
	Profile string `json:"profile,omitempty"`
	// Network is none, allowlist or host; Allow what an allowlist lets
	// through.
	Network         string   `json:"network"`
	Allow           []string `json:"allow,omitempty"`
	ReadOnlyProject bool     `json:"read_only_project,omitempty"`
	// Boot: it runs a systemd of its own (Sandbox.System).
	Boot bool `json:"boot,omitempty"`
	// FrozenIdle: frozen for being idle; the next call that needs it
	// thaws it.
	FrozenIdle bool `json:"frozen_idle,omitempty"`
	// HostIDs are the first and last host id of its user namespace;
	// empty when it has none.
	HostIDs []uint32 `json:"host_ids,omitempty"`
	// Staleness is current, stale (the project moved on since its
	// base) or unknown.
	Staleness string `json:"staleness"`
	Limits    Limits `json:"limits"`
	Usage     Usage  `json:"usage"`
}

// Limits are the limits a sandbox was made with; a zero field is not
// set.
type Limits struct {
	MemoryMax     sandboxd1.Size     `json:"memory_max,omitempty"`
	MemoryHigh    sandboxd1.Size     `json:"memory_high,omitempty"`
	MemorySwapMax *sandboxd1.Size    `json:"memory_swap_max,omitempty"` // nil: not set
	TasksMax      uint64             `json:"tasks_max,omitempty"`
	CPUWeight     uint64             `json:"cpu_weight,omitempty"`
	IOWeight      uint64             `json:"io_weight,omitempty"`
	CPUQuota      sandboxd1.CPUQuota `json:"cpu_quota,omitempty"`
	RuntimeMax    time.Duration      `json:"runtime_max,omitempty"`
	DiskQuota     sandboxd1.Size     `json:"disk_quota,omitempty"`
}

// Usage is a sandbox's live usage; nil where the host does not account
// it.
type Usage struct {
	MemoryCurrent *uint64 `json:"memory_current"` // bytes
	// MemoryPeak is the most bytes it used at once since its scope
	// started, page cache included.
	MemoryPeak   *uint64        `json:"memory_peak"`
	CPU          *time.Duration `json:"cpu"` // CPU time used
	TasksCurrent *uint64        `json:"tasks_current"`
	DiskUsed     *uint64        `json:"disk_used"` // bytes written
}

// Status reads every property of the sandbox. Its staleness costs the
// daemon a snapshot of the project; State and Usage read less.
func (s *Sandbox) Status(ctx context.Context) (Status, error) {
	op := "reading the status of " + s.label()
	props, err := s.getAll(ctx, op)
	if err != nil {
		return Status{}, err
	}
	st, err := decodeStatus(props)
	if err != nil {
		return Status{}, fmt.Errorf("%s: %w", op, err)
	}
	return st, nil
}

// Properties reads every property of the sandbox as the bus gives it,
// by its D-Bus name (docs/dbus-api.md), for a caller that shows them as
// they are (`sandboxctl status --json`); Status is the same, typed.
func (s *Sandbox) Properties(ctx context.Context) (map[string]dbus.Variant, error) {
	return s.getAll(ctx, "reading the properties of "+s.label())
}

func (s *Sandbox) getAll(ctx context.Context, op string) (map[string]dbus.Variant, error) {
	var props map[string]dbus.Variant
	err := call(ctx, s.c.object(s.id), op, sandboxd1.PropertiesInterface, sandboxd1.MethodGetAll,
		[]any{sandboxd1.SandboxInterface}, &props)
	return props, err
}

// State reads the sandbox's State alone: ready, running, frozen, ...
func (s *Sandbox) State(ctx context.Context) (string, error) {
	var state string
	err := s.property(ctx, sandboxd1.PropState, func(v dbus.Variant) error { return storeVariant(v, &state) })
	return state, err
}

// Expires reads the end of the sandbox's time to live alone; zero when
// it has none.
func (s *Sandbox) Expires(ctx context.Context) (time.Time, error) {
	var us uint64
	err := s.property(ctx, sandboxd1.PropExpires, func(v dbus.Variant) error { return storeVariant(v, &us) })
	return fromMicros(us), err
}

// Usage reads the sandbox's live usage alone.
func (s *Sandbox) Usage(ctx context.Context) (Usage, error) {
	var u Usage
	err := s.property(ctx, sandboxd1.PropUsage, func(v dbus.Variant) error {
		var m map[string]dbus.Variant
		if err := storeVariant(v, &m); err != nil {
			return err
		}
		var err error
		u, err = decodeUsage(m)
		return err
	})
	if err != nil {
		return Usage{}, err
	}
	return u, nil
}

func (s *Sandbox) property(ctx context.Context, name string, decode func(dbus.Variant) error) error {
	var v dbus.Variant
	op := "reading " + name + " of " + s.label()
	if err := call(ctx, s.c.object(s.id), op, sandboxd1.PropertiesInterface, sandboxd1.MethodGet,
		[]any{sandboxd1.SandboxInterface, name}, &v); err != nil {
		return err
	}
	if err := decode(v); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	return nil
}

func storeVariant(v dbus.Variant, dst any) error {
	if err := dbus.Store([]any{v.Value()}, dst); err != nil {
		return fmt.Errorf("a value of type %s: %w", v.Signature(), err)
	}
	return nil
}

// decoder reads properties (or an a{sv}'s keys) into Go values, keeping
// the first error; a key that is missing leaves its value alone.
type decoder struct {
	m   map[string]dbus.Variant
	err error
}

func (d *decoder) get(name string, dst any) bool {
	v, ok := d.m[name]
	if !ok || d.err != nil {
		return false
	}
	if err := storeVariant(v, dst); err != nil {
		d.err = fmt.Errorf("%s: %w", name, err)
		return false
	}
	return true
}

func decodeStatus(props map[string]dbus.Variant) (Status, error) {
	var st Status
	d := &decoder{m: props}
	var created, expires uint64
	d.get(sandboxd1.PropID, &st.ID)
	d.get(sandboxd1.PropName, &st.Name)
	d.get(sandboxd1.PropProject, &st.Project)
	d.get(sandboxd1.PropState, &st.State)
	d.get(sandboxd1.PropOwner, &st.Owner)
	d.get(sandboxd1.PropCreated, &created)
	d.get(sandboxd1.PropExpires, &expires)
	d.get(sandboxd1.PropPath, &st.Path)
	d.get(sandboxd1.PropUnit, &st.Unit)
	d.get(sandboxd1.PropBase, &st.Base)
	d.get(sandboxd1.PropProfile, &st.Profile)
	d.get(sandboxd1.PropNetwork, &st.Network)
	d.get(sandboxd1.PropAllow, &st.Allow)
	d.get(sandboxd1.PropReadOnlyProject, &st.ReadOnlyProject)
	d.get(sandboxd1.PropBoot, &st.Boot)
	d.get(sandboxd1.PropFrozenIdle, &st.FrozenIdle)
	d.get(sandboxd1.PropHostIDs, &st.HostIDs)
	d.get(sandboxd1.PropStaleness, &st.Staleness)
	var limits, usage map[string]dbus.Variant
	d.get(sandboxd1.PropLimits, &limits)
	d.get(sandboxd1.PropUsage, &usage)
	if d.err != nil {
		return Status{}, d.err
	}
	st.Created, st.Expires = fromMicros(created), fromMicros(expires)
	var err error
	if st.Limits, err = decodeLimits(limits); err != nil {
		return Status{}, fmt.Errorf("%s: %w", sandboxd1.PropLimits, err)
	}
	if st.Usage, err = decodeUsage(usage); err != nil {
		return Status{}, fmt.Errorf("%s: %w", sandboxd1.PropUsage, err)
	}
	return st, nil
}

func decodeLimits(m map[string]dbus.Variant) (Limits, error) {
	var l Limits
	d := &decoder{m: m}
	var memMax, memHigh, swap, disk, quota, runtime uint64
	d.get(sandboxd1.OptMemoryMax, &memMax)
	d.get(sandboxd1.OptMemoryHigh, &memHigh)
	if d.get(sandboxd1.OptMemorySwapMax, &swap) {
		l.MemorySwapMax = new(sandboxd1.Size(swap))
	}
	d.get(sandboxd1.OptTasksMax, &l.TasksMax)
	d.get(sandboxd1.OptCPUWeight, &l.CPUWeight)
	d.get(sandboxd1.OptIOWeight, &l.IOWeight)
	d.get(sandboxd1.OptCPUQuotaPerSecUSec, &quota)
	d.get(sandboxd1.OptRuntimeMaxUSec, &runtime)
	d.get(sandboxd1.OptDiskQuota, &disk)
	l.MemoryMax, l.MemoryHigh, l.DiskQuota = sandboxd1.Size(memMax), sandboxd1.Size(memHigh), sandboxd1.Size(disk)
	l.CPUQuota = sandboxd1.CPUQuota(quota / 10_000)
	l.RuntimeMax = time.Duration(runtime) * time.Microsecond
	return l, d.err
}

func decodeUsage(m map[string]dbus.Variant) (Usage, error) {
	var u Usage
	d := &decoder{m: m}
	opt := func(name string) *uint64 {
		var v uint64
		if d.get(name, &v) {
			return &v
		}
		return nil
	}
	u.MemoryCurrent = opt(sandboxd1.UsageMemoryCurrent)
	u.MemoryPeak = opt(sandboxd1.UsageMemoryPeak)
	u.TasksCurrent = opt(sandboxd1.UsageTasksCurrent)
	u.DiskUsed = opt(sandboxd1.UsageDiskUsed)
	if ns := opt(sandboxd1.UsageCPUUsageNSec); ns != nil {
		u.CPU = new(time.Duration(*ns))
	}
	return u, d.err
}
