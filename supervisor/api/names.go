package api

import (
	"strings"

	"github.com/godbus/dbus/v5"
)

// Names on the bus. Clients (sandboxctl) use them too.
const (
	BusName          = "org.sandboxd1"
	ManagerPath      = dbus.ObjectPath("/org/sandboxd1")
	ManagerInterface = "org.sandboxd1.Manager"
	SandboxInterface = "org.sandboxd1.Sandbox"
	// SandboxPathPrefix is the parent of every sandbox's object: the
	// object of sandbox ID is SandboxPathPrefix + "/" + ID.
	SandboxPathPrefix = dbus.ObjectPath("/org/sandboxd1/sandbox")
)

// D-Bus error names the API answers with. Bad input uses the standard
// InvalidArgs, which godbus already sends for a call of the wrong
// signature, so a client has one name for every kind of bad input.
const (
	ErrorAccessDenied  = "org.sandboxd1.Error.AccessDenied"
	ErrorNoSuchSandbox = "org.sandboxd1.Error.NoSuchSandbox"
	ErrorNoSuchProject = "org.sandboxd1.Error.NoSuchProject"
	ErrorInvalidArgs   = "org.freedesktop.DBus.Error.InvalidArgs"
	ErrorFailed        = "org.sandboxd1.Error.Failed"
	// ErrorLimitReached: admission control refused a create (too many
	// sandboxes for the host or the caller, or too much memory promised).
	ErrorLimitReached = "org.sandboxd1.Error.LimitReached"
	// ErrorWrongState: the sandbox's state does not allow the call (Thaw
	// of a sandbox that is not frozen).
	ErrorWrongState = "org.sandboxd1.Error.WrongState"
	// ErrorNoSuchCheckpoint: the sandbox has no checkpoint of that name.
	ErrorNoSuchCheckpoint = "org.sandboxd1.Error.NoSuchCheckpoint"
	// ErrorNoSuchCommand: Signal names no running command of the sandbox.
	ErrorNoSuchCommand = "org.sandboxd1.Error.NoSuchCommand"
	// ErrorExists: the name is taken, by another sandbox (CreateSandbox's
	// Name) or project (AddProject).
	ErrorExists = "org.sandboxd1.Error.Exists"
	// ErrorConflict: a promotion's change set and the project's own
	// changes since the sandbox's base touch the same paths.
	ErrorConflict = "org.sandboxd1.Error.Conflict"
	// ErrorBusy: another promotion of the same project is under way.
	ErrorBusy = "org.sandboxd1.Error.Busy"
	// ErrorNoSuchPromotion: no promotion of that id that the caller may see.
	ErrorNoSuchPromotion = "org.sandboxd1.Error.NoSuchPromotion"
)

// Standard errors of objects and properties (D-Bus specification).
const (
	errorUnknownObject    = "org.freedesktop.DBus.Error.UnknownObject"
	errorUnknownInterface = "org.freedesktop.DBus.Error.UnknownInterface"
	errorUnknownProperty  = "org.freedesktop.DBus.Error.UnknownProperty"
	errorPropertyReadOnly = "org.freedesktop.DBus.Error.PropertyReadOnly"
)

// maxIDLen bounds an id; the supervisor's ids are 12 hex digits.
const maxIDLen = 64

// ValidID says whether id can name a sandbox: it must be usable as one
// element of an object path ([A-Za-z0-9_], D-Bus's rule), which also keeps
// "..", "/" and the like out of everything an id reaches.
func ValidID(id string) bool {
	if id == "" || len(id) > maxIDLen {
		return false
	}
	for _, c := range []byte(id) {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// SandboxPath is the object path of the sandbox id (which must be valid).
func SandboxPath(id string) dbus.ObjectPath {
	return SandboxPathPrefix + "/" + dbus.ObjectPath(id)
}

// idFromPath returns the sandbox id that path names, if it names one.
func idFromPath(path dbus.ObjectPath) (string, bool) {
	id, ok := strings.CutPrefix(string(path), string(SandboxPathPrefix)+"/")
	if !ok || !ValidID(id) {
		return "", false
	}
	return id, true
}

// ListEntry is one sandbox as ListSandboxes returns it: the D-Bus struct
// (ssssuto).
type ListEntry struct {
	ID      string
	Name    string // "" when it has none
	Project string
	State   string
	Owner   uint32          // the uid that created it
	Created uint64          // µs since the Unix epoch
	Object  dbus.ObjectPath // its org.sandboxd1.Sandbox object
}

// ProjectEntry is one project as ListProjects returns it: the D-Bus
// struct (sss).
type ProjectEntry struct {
	Name string `json:"name"`
	// Location is a btrfs subvolume path or a ZFS dataset.
	Location string `json:"location"`
	// Origin is "config" (sandboxd.toml's [[project]]) or "added"
	// (AddProject).
	Origin string `json:"origin"`
}
