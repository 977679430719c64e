package options

import (
	"errors"
	"fmt"

	"github.com/godbus/dbus/v5"

	"github.com/sandboxd/sandboxd/sandboxd1"
	"github.com/sandboxd/sandboxd/supervisor/commands"
	"github.com/sandboxd/sandboxd/supervisor/try"
)

// Try splits Try's a{sv} into CreateSandbox's options, Exec's
// and its own.
func Try(in map[string]dbus.Variant) (try.Options, error) {
	var to try.Options
	create, exec := map[string]dbus.Variant{}, map[string]dbus.Variant{}
	var errs []error
	for name, v := range in {
		var err error
		switch name {
		case sandboxd1.OptInputs:
			err = dbus.Store([]any{v.Value()}, &to.Inputs)
		case sandboxd1.OptParallel:
			var n uint32
			if err = dbus.Store([]any{v.Value()}, &n); err == nil {
				if n == 0 || n > 1024 {
					err = errors.New("want 1 to 1024")
				}
				to.Parallel = int(n)
			}
		case sandboxd1.OptFrom:
			if err = dbus.Store([]any{v.Value()}, &to.From); err == nil && to.From == "" {
				err = errors.New("empty: give the id or name of the sandbox to fork")
			}
		case sandboxd1.OptEnvironment, sandboxd1.OptWorkingDirectory, sandboxd1.OptRoot, sandboxd1.OptTimeoutUSec, sandboxd1.OptDetach:
			exec[name] = v
		default:
			create[name] = v
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("option %s (%s): %v", name, v.Signature(), err))
		}
	}
	if to.From != "" {
		// A fork has its source's options: only the names' prefix counts.
		for name := range create {
			if name != sandboxd1.OptName {
				errs = append(errs, fmt.Errorf("option %s: with %s each sandbox is a fork, with the options of the sandbox it forks", name, sandboxd1.OptFrom))
			}
		}
	}
	var err error
	if to.Create, err = Create(create); err != nil {
		errs = append(errs, err)
	}
	var eo commands.ExecOptions
	if err := Exec(&eo, exec); err != nil {
		errs = append(errs, err)
	}
	to.Env, to.Dir, to.AsRoot, to.Detach, to.Timeout = eo.Env, eo.Dir, eo.AsRoot, eo.Detach, eo.Timeout
	if _, ok := exec[sandboxd1.OptTimeoutUSec]; ok && eo.Timeout == 0 {
		to.Timeout = try.NoTimeout
	}
	return to, errors.Join(errs...)
}
