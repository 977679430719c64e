package sandboxd1

import (
	"strings"

	"github.com/godbus/dbus/v5"
)

// Names on the bus.
const (
	BusName          = "org.sandboxd1"
	ManagerPath      = dbus.ObjectPath("/org/sandboxd1")
	ManagerInterface = "org.sandboxd1.Manager"
	SandboxInterface = "org.sandboxd1.Sandbox"
	// SandboxPathPrefix is the parent of every sandbox's object: the
	// object of sandbox ID is SandboxPathPrefix + "/" + ID.
	SandboxPathPrefix = dbus.ObjectPath("/org/sandboxd1/sandbox")
)

// The standard interfaces the objects also have.
const (
	PropertiesInterface     = "org.freedesktop.DBus.Properties"
	IntrospectableInterface = "org.freedesktop.DBus.Introspectable"
	PeerInterface           = "org.freedesktop.DBus.Peer"
)

// MaxIDLen bounds an id; the supervisor's ids are 12 hex digits.
const MaxIDLen = 64

// ValidID says whether id can name a sandbox: it must be usable as one
// element of an object path ([A-Za-z0-9_], D-Bus's rule), which also keeps
// "..", "/" and the like out of everything an id reaches.
func ValidID(id string) bool {
	if id == "" || len(id) > MaxIDLen {
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

// IDFromPath returns the sandbox id that path names, if it names one.
func IDFromPath(path dbus.ObjectPath) (string, bool) {
	id, ok := strings.CutPrefix(string(path), string(SandboxPathPrefix)+"/")
	if !ok || !ValidID(id) {
		return "", false
	}
	return id, true
}
