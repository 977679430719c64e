package options

import (
	"fmt"

	"github.com/godbus/dbus/v5"

	"github.com/sandboxd/sandboxd/sandboxd1"
	"github.com/sandboxd/sandboxd/supervisor/commands"
)

// Write reads WriteFile's and WriteFileFrom's options.
func Write(uid uint32, options map[string]dbus.Variant) (commands.FileAccess, commands.WriteOptions, error) {
	who := commands.FileAccess{UID: uid}
	var wo commands.WriteOptions
	create := true
	for name, v := range options {
		var err error
		switch name {
		case sandboxd1.OptMode:
			err = dbus.Store([]any{v.Value()}, &wo.Mode)
			wo.HasMode = true
		case sandboxd1.OptCreate:
			err = dbus.Store([]any{v.Value()}, &create)
		case sandboxd1.OptAppend:
			err = dbus.Store([]any{v.Value()}, &wo.Append)
		case sandboxd1.OptOffset:
			err = dbus.Store([]any{v.Value()}, &wo.Offset)
			wo.AtOffset = true
		case sandboxd1.OptRoot:
			err = dbus.Store([]any{v.Value()}, &who.AsRoot)
		default:
			err = fmt.Errorf("unknown option (known: %s, %s, %s, %s, %s)", sandboxd1.OptMode, sandboxd1.OptCreate,
				sandboxd1.OptAppend, sandboxd1.OptOffset, sandboxd1.OptRoot)
		}
		if err != nil {
			return who, wo, fmt.Errorf("option %s (%s): %v", name, v.Signature(), err)
		}
	}
	wo.NoCreate = !create
	return who, wo, nil
}

// ListFiles reads ListFiles's options: Recursive (b), MaxEntries (u, at
// most sandboxd1.MaxListEntries), Root (b).
func ListFiles(uid uint32, in map[string]dbus.Variant) (who commands.FileAccess, recursive bool, most uint32, err error) {
	who = commands.FileAccess{UID: uid}
	for name, v := range in {
		switch name {
		case sandboxd1.OptRecursive:
			err = dbus.Store([]any{v.Value()}, &recursive)
		case sandboxd1.OptMaxEntries:
			err = dbus.Store([]any{v.Value()}, &most)
		case sandboxd1.OptRoot:
			err = dbus.Store([]any{v.Value()}, &who.AsRoot)
		default:
			err = fmt.Errorf("unknown option (known: %s, %s, %s)", sandboxd1.OptRecursive, sandboxd1.OptMaxEntries, sandboxd1.OptRoot)
		}
		if err != nil {
			return who, false, 0, fmt.Errorf("option %s (%s): %v", name, v.Signature(), err)
		}
	}
	if most > sandboxd1.MaxListEntries {
		return who, false, 0, fmt.Errorf("MaxEntries %d is over %d", most, sandboxd1.MaxListEntries)
	}
	return who, recursive, most, nil
}
