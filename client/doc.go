// Package client is a Go client of sandboxd: typed, context-first calls
// of its D-Bus API (org.sandboxd1 on the system bus, docs/dbus-api.md),
// made as the calling process's user, so that every access rule of the
// daemon applies.
//
//	c, err := client.Connect(ctx)
//	...
//	defer c.Close()
//	sb, err := c.Create(ctx, "web", client.CreateOptions{MemoryMax: 512 * sandboxd1.MiB})
//	...
//	defer sb.Destroy(ctx)
//	st, err := sb.Exec(ctx, []string{"make", "test"}, client.ExecOptions{Stdout: os.Stdout, Stderr: os.Stderr})
//
// Exec hands the command the caller's files themselves (an *os.File is
// passed over the bus as a descriptor) or pipes it copies through (any
// other io.Reader or io.Writer); its end comes as the daemon's
// CommandExited signal, and a daemon that restarts meanwhile is noticed
// (ErrDaemonRestarted). Ending Exec's context kills the command.
//
// Errors of the daemon are *Error values that keep its message and
// match, with errors.Is, the sentinel of their D-Bus name: ErrNoSuchSandbox,
// ErrAccessDenied, ErrInvalidArgs, ErrConflict, ... .
//
// The package imports only the wire contract (sandboxd1), godbus and the
// standard library: a program that links it links nothing of the daemon.
//
// # Getting it
//
// It is the package github.com/sandboxd/sandboxd/client of the module
// github.com/sandboxd/sandboxd (Go 1.26 or later). No release is tagged
// yet, so a commit is the version, as a pseudo-version:
//
//	go get github.com/sandboxd/sandboxd/client@main
//
// or, from a checkout of the repository (the one the daemon was built
// from):
//
//	go mod edit -replace github.com/sandboxd/sandboxd=/path/to/sandboxd
//	go get github.com/sandboxd/sandboxd/client
//
// It speaks org.sandboxd1, whose published methods never change: a client
// of any commit works with a daemon of any other for the calls both know;
// a call the daemon is too old for fails with ErrInvalidArgs
// (org.freedesktop.DBus.Error.UnknownMethod).
package client
