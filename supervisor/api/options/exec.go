package options

import (
	"errors"
	"fmt"
	"maps"

	"github.com/godbus/dbus/v5"

	"github.com/sandboxd/sandboxd/sandboxd1"
	"github.com/sandboxd/sandboxd/supervisor/commands"
)

// Exec reads Exec's options into o.
func Exec(o *commands.ExecOptions, options map[string]dbus.Variant) error {
	for name, v := range options {
		var err error
		switch name {
		case "Environment":
			err = dbus.Store([]any{v.Value()}, &o.Env)
		case "WorkingDirectory":
			err = dbus.Store([]any{v.Value()}, &o.Dir)
		case "Root":
			err = dbus.Store([]any{v.Value()}, &o.AsRoot)
		case "Detach":
			err = dbus.Store([]any{v.Value()}, &o.Detach)
		case "TimeoutUSec":
			var us uint64
			if err = dbus.Store([]any{v.Value()}, &us); err == nil {
				o.Timeout, err = usec(us)
			}
		case "OutputLimit":
			var n uint64
			if err = dbus.Store([]any{v.Value()}, &n); err == nil {
				if n > 1<<62 {
					err = errors.New("too large")
				}
				o.OutputLimit = int64(n)
			}
		default:
			return fmt.Errorf("unknown option %q (known: Environment, WorkingDirectory, Root, TimeoutUSec, OutputLimit, Detach)", name)
		}
		if err != nil {
			return fmt.Errorf("option %s (%s): %v", name, v.Signature(), err)
		}
	}
	return nil
}

// Spawn reads Spawn's options into o: Exec's, and Restart (b), which
// declares the process (spawned again each time the sandbox starts).
func Spawn(o *commands.ExecOptions, options map[string]dbus.Variant) error {
	if v, ok := options[sandboxd1.OptRestart]; ok {
		options = maps.Clone(options)
		delete(options, sandboxd1.OptRestart)
		if err := v.Store(&o.Restart); err != nil {
			return fmt.Errorf("option %s (%s): %v", sandboxd1.OptRestart, v.Signature(), err)
		}
	}
	return Exec(o, options)
}
