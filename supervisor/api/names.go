package api

import (
	"github.com/godbus/dbus/v5"

	"github.com/sandboxd/sandboxd/sandboxd1"
)

// The names on the bus, the error names and the types that cross it are
// the contract's, in sandboxd1: the daemon and its clients share them.
// These aliases keep the daemon's own test programs (tests/bench,
// tests/load) compiling; new code uses sandboxd1.
const (
	BusName          = sandboxd1.BusName
	ManagerPath      = sandboxd1.ManagerPath
	ManagerInterface = sandboxd1.ManagerInterface
	SandboxInterface = sandboxd1.SandboxInterface
)

// SandboxPath is sandboxd1.SandboxPath.
func SandboxPath(id string) dbus.ObjectPath { return sandboxd1.SandboxPath(id) }

// ListEntry and ChangeEntry are sandboxd1's.
type (
	ListEntry   = sandboxd1.ListEntry
	ChangeEntry = sandboxd1.ChangeEntry
)
