package options

import (
	"errors"
	"fmt"

	"github.com/godbus/dbus/v5"

	"github.com/sandboxd/sandboxd/sandboxd1"
	"github.com/sandboxd/sandboxd/supervisor/fork"
)

// Fork reads Fork's a{sv}; an unknown option or a value of the wrong
// type is refused by name.
func Fork(in map[string]dbus.Variant) (fork.Options, error) {
	var o fork.Options
	var errs []error
	for name, v := range in {
		var err error
		switch name {
		case sandboxd1.OptCount:
			var n uint32
			if err = dbus.Store([]any{v.Value()}, &n); err == nil {
				if n == 0 || n > fork.MaxCount {
					err = fmt.Errorf("%d: make 1 to %d forks at once", n, fork.MaxCount)
				}
				o.Count = int(n)
			}
		case sandboxd1.OptNames:
			err = dbus.Store([]any{v.Value()}, &o.Names)
		case sandboxd1.OptSpawn:
			err = dbus.Store([]any{v.Value()}, &o.Spawn)
		default:
			err = fmt.Errorf("not an option of Fork (%s, %s, %s)", sandboxd1.OptCount, sandboxd1.OptNames, sandboxd1.OptSpawn)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("option %s (%s): %v", name, v.Signature(), err))
		}
	}
	return o, errors.Join(errs...)
}
