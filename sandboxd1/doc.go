// Package sandboxd1 is the D-Bus contract of org.sandboxd1: the names,
// object paths, interfaces, errors, methods, options and properties that
// sandboxd serves on the system bus, the types that cross it, and the
// small value parsers (sizes, CPU quotas) both ends use.
//
// The daemon (supervisor/api) and every client (sandboxctl, scripts
// written in Go) import it, so that both sides spell the wire alike. It
// imports nothing of the daemon: a client that links it links no store,
// no storage backend and no runtime. docs/dbus-api.md describes each
// method; contrib/dbus/ holds the introspection XML.
package sandboxd1
