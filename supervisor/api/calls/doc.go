// Package calls says what each call of org.sandboxd1 is, for the server
// that serves it: whether it changes something (so a success is
// journaled) and whether it is heavy (it holds much memory, takes
// snapshots or runs commands), and bounds the heavy calls that run at
// once, per caller and in all. It knows the calls by name only, so the
// table and its limits are tested apart from the bus.
package calls
