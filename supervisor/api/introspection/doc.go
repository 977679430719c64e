// Package introspection holds the introspection XML that sandboxd serves
// for org.sandboxd1: the manager's, each sandbox's, and the node above
// the sandboxes. It is the wire's description, kept byte for byte equal
// to the files packaging ships (supervisor/api's tests hold both to the
// methods served), apart from the code that serves it.
package introspection
