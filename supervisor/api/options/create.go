package options

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/sandboxd/sandboxd/sandboxd1"
	"github.com/sandboxd/sandboxd/supervisor"
)

// An option of CreateSandbox: its D-Bus type and where it goes. Names and
// units follow systemd's unit properties, so a caller who knows
// `systemd-run -p` knows these.
type option struct {
	signature string // "t" or "s"
	unit      string // for messages: what the number counts
	set       func(o *supervisor.CreateOptions, v any) error
}

var createOptions = map[string]option{
	sandboxd1.OptMemoryMax: {signature: "t", unit: "bytes", set: func(o *supervisor.CreateOptions, v any) error {
		// Less and the sandbox's init is killed as it starts: the sandbox
		// would be made, and nothing could run in it.
		if n := v.(uint64); n < uint64(sandboxd1.MinMemoryMax) {
			return fmt.Errorf("is %d bytes, below the least a sandbox can run with, %s (%d bytes): its init and a shell need that much to start",
				n, sandboxd1.MinMemoryMax, uint64(sandboxd1.MinMemoryMax))
		}
		o.Limits.MemoryMax = new(v.(uint64))
		return nil
	}},
	sandboxd1.OptMemoryHigh:         bytesOption(func(o *supervisor.CreateOptions, v uint64) { o.Limits.MemoryHigh = &v }),
	sandboxd1.OptMemorySwapMax:      bytesOption(func(o *supervisor.CreateOptions, v uint64) { o.Limits.MemorySwapMax = &v }),
	sandboxd1.OptTasksMax:           countOption("tasks", func(o *supervisor.CreateOptions, v uint64) { o.Limits.TasksMax = &v }),
	sandboxd1.OptCPUWeight:          countOption("weight, 1..10000", func(o *supervisor.CreateOptions, v uint64) { o.Limits.CPUWeight = &v }),
	sandboxd1.OptIOWeight:           countOption("weight, 1..10000", func(o *supervisor.CreateOptions, v uint64) { o.Limits.IOWeight = &v }),
	sandboxd1.OptCPUQuotaPerSecUSec: usecOption(func(o *supervisor.CreateOptions, d time.Duration) { o.Limits.CPUQuota = &d }),
	sandboxd1.OptRuntimeMaxUSec:     usecOption(func(o *supervisor.CreateOptions, d time.Duration) { o.Limits.RuntimeMax = &d }),
	sandboxd1.OptDiskQuota: {signature: "t", unit: "bytes", set: func(o *supervisor.CreateOptions, v any) error {
		// 0 would be the supervisor's "no quota": a caller who sets it
		// means a quota, and a quota of nothing is a mistake.
		if v.(uint64) == 0 {
			return errors.New("is 0, which leaves no room to write (leave it out for no quota)")
		}
		o.DiskQuota = v.(uint64)
		return nil
	}},
	sandboxd1.OptTTLUSec: {signature: "t", unit: "µs", set: func(o *supervisor.CreateOptions, v any) error {
		d, err := usec(v.(uint64))
		if err == nil && d == 0 {
			err = errors.New("is 0, which would expire the sandbox at once (leave it out for no time limit)")
		}
		o.TTL = d
		return err
	}},
	sandboxd1.OptName: {signature: "s", unit: "a name", set: func(o *supervisor.CreateOptions, v any) error {
		// "" would be the supervisor's "no name": a caller who sets it
		// means a name.
		if v.(string) == "" {
			return errors.New("is empty (leave it out for no name)")
		}
		if err := supervisor.ValidateSandboxName(v.(string)); err != nil {
			return err
		}
		o.Name = v.(string)
		return nil
	}},
	sandboxd1.OptProfile: {signature: "s", unit: "a name", set: func(o *supervisor.CreateOptions, v any) error {
		o.Profile = v.(string)
		return nil
	}},
	sandboxd1.OptNetwork: {signature: "s", unit: "none, allowlist or host", set: func(o *supervisor.CreateOptions, v any) error {
		o.Network = v.(string)
		return nil
	}},
	sandboxd1.OptAllow: {signature: "as", unit: "host:port entries", set: func(o *supervisor.CreateOptions, v any) error {
		o.Allow = v.([]string)
		return nil
	}},
	sandboxd1.OptBoot: {signature: "b", unit: "true or false", set: func(o *supervisor.CreateOptions, v any) error {
		o.Boot = v.(bool)
		return nil
	}},
	sandboxd1.OptReadOnlyProject: {signature: "b", unit: "true or false", set: func(o *supervisor.CreateOptions, v any) error {
		o.ReadOnlyProject = new(v.(bool))
		return nil
	}},
}

func bytesOption(set func(*supervisor.CreateOptions, uint64)) option {
	return countOption("bytes", set)
}

func countOption(unit string, set func(*supervisor.CreateOptions, uint64)) option {
	return option{signature: "t", unit: unit, set: func(o *supervisor.CreateOptions, v any) error {
		set(o, v.(uint64))
		return nil
	}}
}

func usecOption(set func(*supervisor.CreateOptions, time.Duration)) option {
	return option{signature: "t", unit: "µs", set: func(o *supervisor.CreateOptions, v any) error {
		d, err := usec(v.(uint64))
		set(o, d)
		return err
	}}
}

// maxUSec is the longest duration Go can hold, in µs (about 292 years).
const maxUSec = uint64(math.MaxInt64 / int64(time.Microsecond))

func usec(v uint64) (time.Duration, error) {
	if v > maxUSec {
		return 0, fmt.Errorf("is %d µs, more than the %d µs (about 292 years) a duration can hold", v, maxUSec)
	}
	return time.Duration(v) * time.Microsecond, nil
}

// CreateNames lists CreateSandbox's options, sorted.
func CreateNames() []string { return slices.Sorted(maps.Keys(createOptions)) }

// Create turns CreateSandbox's a{sv} into CreateOptions. Every
// unknown option, wrong type and impossible value is reported, each by
// name, in one error.
func Create(in map[string]dbus.Variant) (supervisor.CreateOptions, error) {
	var o supervisor.CreateOptions
	names := make([]string, 0, len(in))
	for name := range in {
		names = append(names, name)
	}
	slices.Sort(names) // the same message for the same call
	var errs []error
	for _, name := range names {
		v := in[name]
		opt, ok := createOptions[name]
		if !ok {
			errs = append(errs, fmt.Errorf("unknown option %q (known: %s)", name, strings.Join(CreateNames(), ", ")))
			continue
		}
		if sig := v.Signature().String(); sig != opt.signature {
			errs = append(errs, fmt.Errorf("option %s has type %s; want %s (%s)", name, sig, opt.signature, opt.unit))
			continue
		}
		if err := opt.set(&o, v.Value()); err != nil {
			errs = append(errs, fmt.Errorf("option %s %w", name, err))
		}
	}
	if len(errs) > 0 {
		msgs := make([]string, len(errs))
		for i, err := range errs {
			msgs[i] = err.Error()
		}
		return o, errors.New(strings.Join(msgs, "; "))
	}
	return o, nil
}
