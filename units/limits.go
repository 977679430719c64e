package units

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	sdbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
)

// Limits are a scope's resource limits. A nil field is no limit (systemd's
// default); a set field is a limit, so a set zero means zero, which only
// MemorySwapMax allows (no swap). Go 1.26's new(expr) fills them:
//
//	units.Limits{MemoryMax: new(uint64(512 << 20)), TasksMax: new(uint64(100))}
//
// Which limits the kernel enforces depends on the cgroup layout: see
// Capabilities.
type Limits struct {
	// CPUQuota is the CPU time the scope may use per second of wall time
	// (CPUQuotaPerSecUSec): 500ms is half a CPU, 2s is two CPUs. At least 1ms.
	CPUQuota *time.Duration
	// CPUWeight is the scope's share of contended CPU time against its
	// siblings (CPUWeight), 1..10000; systemd's default is 100.
	CPUWeight *uint64
	// MemoryMax is the hard memory limit in bytes (MemoryMax): above it the
	// kernel reclaims, then OOM-kills a process of the scope.
	MemoryMax *uint64
	// MemoryHigh is the throttling point in bytes (MemoryHigh): above it
	// the scope is slowed and reclaimed hard, but not killed. At most
	// MemoryMax.
	MemoryHigh *uint64
	// MemorySwapMax is the swap the scope may use, in bytes
	// (MemorySwapMax); 0 is none.
	MemorySwapMax *uint64
	// TasksMax is how many processes and threads the scope may hold at
	// once (TasksMax): a fork beyond it fails with EAGAIN.
	TasksMax *uint64
	// IOWeight is the scope's share of contended block IO (IOWeight),
	// 1..10000; systemd's default is 100.
	IOWeight *uint64
	// RuntimeMax is how long the scope may run (RuntimeMaxUSec): then
	// systemd stops it and marks it failed with result "timeout".
	RuntimeMax *time.Duration
}

// Validate refuses limits that make no sense, naming each field at fault.
// The error wraps ErrInvalidLimits.
func (l Limits) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidLimits}, args...)...))
	}
	if l.CPUQuota != nil && *l.CPUQuota < time.Millisecond {
		bad("CPUQuota is %v; want at least 1ms of CPU time per second (nil for no limit)", *l.CPUQuota)
	}
	weight := func(field string, w *uint64) {
		if w != nil && (*w < 1 || *w > 10000) {
			bad("%s is %d; want 1..10000 (nil for systemd's default, 100)", field, *w)
		}
	}
	weight("CPUWeight", l.CPUWeight)
	weight("IOWeight", l.IOWeight)
	if l.MemoryMax != nil && *l.MemoryMax == 0 {
		bad("MemoryMax is 0, which leaves no memory at all (nil for no limit)")
	}
	if l.MemoryHigh != nil && *l.MemoryHigh == 0 {
		bad("MemoryHigh is 0, which throttles everything (nil for no limit)")
	}
	if l.MemoryHigh != nil && l.MemoryMax != nil && *l.MemoryHigh > *l.MemoryMax {
		bad("MemoryHigh (%d bytes) is above MemoryMax (%d bytes); it would never apply", *l.MemoryHigh, *l.MemoryMax)
	}
	if l.TasksMax != nil && *l.TasksMax == 0 {
		bad("TasksMax is 0, which leaves room for no process at all (nil for no limit)")
	}
	if l.RuntimeMax != nil && *l.RuntimeMax < time.Microsecond {
		bad("RuntimeMax is %v; want a positive duration of at least 1µs (nil for no limit)", *l.RuntimeMax)
	}
	return errors.Join(errs...)
}

// unset is how systemd reports "no limit" (infinity) and "no value" alike.
const unset = math.MaxUint64

// properties are l as transient unit properties; nil fields are left out,
// so systemd's defaults hold.
func (l Limits) properties() []sdbus.Property {
	var props []sdbus.Property
	add := func(name string, v *uint64) {
		if v != nil {
			props = append(props, sdbus.Property{Name: name, Value: dbus.MakeVariant(*v)})
		}
	}
	usec := func(d *time.Duration) *uint64 {
		if d == nil {
			return nil
		}
		return new(uint64(d.Microseconds()))
	}
	add("CPUQuotaPerSecUSec", usec(l.CPUQuota))
	add("CPUWeight", l.CPUWeight)
	add("MemoryMax", l.MemoryMax)
	add("MemoryHigh", l.MemoryHigh)
	add("MemorySwapMax", l.MemorySwapMax)
	add("TasksMax", l.TasksMax)
	add("IOWeight", l.IOWeight)
	add("RuntimeMaxUSec", usec(l.RuntimeMax))
	return props
}

// limitsFrom reads the limits in force from a scope's properties; what
// systemd reports as infinity or unset is nil.
func limitsFrom(props map[string]any) Limits {
	get := func(name string) *uint64 {
		v, ok := props[name].(uint64)
		if !ok || v == unset {
			return nil
		}
		return &v
	}
	dur := func(name string) *time.Duration {
		v := get(name)
		if v == nil || *v > math.MaxInt64/uint64(time.Microsecond) {
			return nil
		}
		return new(time.Duration(*v) * time.Microsecond)
	}
	return Limits{
		CPUQuota:      dur("CPUQuotaPerSecUSec"),
		CPUWeight:     get("CPUWeight"),
		MemoryMax:     get("MemoryMax"),
		MemoryHigh:    get("MemoryHigh"),
		MemorySwapMax: get("MemorySwapMax"),
		TasksMax:      get("TasksMax"),
		IOWeight:      get("IOWeight"),
		RuntimeMax:    dur("RuntimeMaxUSec"),
	}
}

// String shows the set limits in systemctl's property names.
func (l Limits) String() string {
	s := ""
	add := func(name string, v any) {
		if s != "" {
			s += " "
		}
		s += fmt.Sprintf("%s=%v", name, v)
	}
	if l.CPUQuota != nil {
		add("CPUQuotaPerSec", *l.CPUQuota)
	}
	for _, f := range []struct {
		name string
		v    *uint64
	}{{"CPUWeight", l.CPUWeight}, {"MemoryMax", l.MemoryMax}, {"MemoryHigh", l.MemoryHigh},
		{"MemorySwapMax", l.MemorySwapMax}, {"TasksMax", l.TasksMax}, {"IOWeight", l.IOWeight}} {
		if f.v != nil {
			add(f.name, *f.v)
		}
	}
	if l.RuntimeMax != nil {
		add("RuntimeMax", *l.RuntimeMax)
	}
	if s == "" {
		return "no limits"
	}
	return s
}

// UnmarshalLimits reads limits kept as JSON (a sandbox's record); empty
// is none.
func UnmarshalLimits(raw []byte, l *Limits) error {
	if len(raw) == 0 {
		return nil
	}
	if err := json.Unmarshal(raw, l); err != nil {
		return fmt.Errorf("reading its limits: %w", err)
	}
	return nil
}
