// Package api serves sandboxd's D-Bus API, org.sandboxd1 on the system bus:
// the manager object /org/sandboxd1 (org.sandboxd1.Manager) through which
// callers create, list, find and destroy sandboxes, and one object per
// sandbox under /org/sandboxd1/sandbox/ (org.sandboxd1.Sandbox) whose
// properties describe it. It is the daemon's only front door, so it is also
// where callers are identified (by the uid and groups the bus vouches for)
// and held to what Access lets them do, and where every call is audited.
//
// The interfaces are described in docs/dbus-api.md; their introspection XML
// is shipped in contrib/dbus/ and is byte for byte what the daemon serves.
// The names and the types on the wire are package sandboxd1's, which
// clients share; this package serves them.
package api
