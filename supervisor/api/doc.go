// Package api serves sandboxd's D-Bus API, org.sandboxd1 on the system bus:
// the manager object /org/sandboxd1 (org.sandboxd1.Manager) through which
// callers create, list, find and destroy sandboxes, and one object per
// sandbox under /org/sandboxd1/sandbox/ (org.sandboxd1.Sandbox) whose
// properties describe it. It is the daemon's only front door, so it is also
// where callers are identified (by the uid and groups the bus vouches for)
// and held to what their access.Policy lets them do, and where every call
// is audited.
//
// The interfaces are described in docs/dbus-api.md; their introspection XML
// is shipped in contrib/dbus/ and is byte for byte what the daemon serves.
// The names and the types on the wire are package sandboxd1's, which
// clients share; this package serves them.
//
// Its self-contained parts are packages below it: access (who calls, what
// they may do, who hears the signals), calls (what each call is, and the
// heavy calls' limits), guard (the connection's first reader, which bounds
// and refuses calls before any handler), introspection (the XML
// served) and options (the calls' a{sv} options, read and bounded). What
// stays here is each call's glue: the objects and their methods, and the
// records and errors translated between the wire and the supervisor.
package api
