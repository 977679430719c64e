package options

import (
	"fmt"

	"github.com/godbus/dbus/v5"

	"github.com/sandboxd/sandboxd/supervisor"
)

// ProjectAccess reads AddProjectWithOptions's options: Users and
// Groups, each an array of names or numeric ids.
func ProjectAccess(opts map[string]dbus.Variant) (supervisor.ProjectAccess, error) {
	var a supervisor.ProjectAccess
	for name, v := range opts {
		list, ok := v.Value().([]string)
		switch {
		case name != "Users" && name != "Groups":
			return a, fmt.Errorf("option %s: unknown (known: Users as, Groups as)", name)
		case !ok:
			return a, fmt.Errorf("option %s has type %s; want as (names or numeric ids)", name, v.Signature())
		case name == "Users":
			a.Users = list
		default:
			a.Groups = list
		}
	}
	return a, nil
}
