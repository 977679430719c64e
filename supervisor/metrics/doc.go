// Package metrics is the room of sandboxd's Prometheus metrics: the
// sandboxes by state and each owner's against the caps, read from the
// store's entries as a scrape asks (no I/O, no sandbox's lock, not the
// admission lock); the creates, commands and promotions counted as the
// audit log hears them (audit.Log.Observe), whatever asked for them (a
// caller, try, a promotion's checks); the latency of the creates the
// front door served (CreateTook). Serve exposes them on a unix socket or
// a loopback address only (serve.go): an owner's uid and usage are not
// for the network.
//
// Labels are bounded: a state, an outcome or a kind from a fixed list,
// and owner, the uid of an owner that has live sandboxes. Never a
// sandbox's name, a project's, or a command.
package metrics
