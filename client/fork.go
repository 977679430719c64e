package client

import (
	"context"

	"github.com/godbus/dbus/v5"

	"github.com/sandboxd/sandboxd/sandboxd1"
)

// ForkOptions are how Fork makes its forks.
type ForkOptions struct {
	// Count is how many forks to make, 1 to sandboxd1.MaxForks; 0 is 1.
	Count int
	// Names names the forks in order, at most Count of them; "" leaves
	// one without a name.
	Names []string
	// Spawn are command lines (argv) started as background processes in
	// each fork, since the sandbox's own are not carried.
	Spawn [][]string
}

// wire is o as Fork's a{sv}: only what is set, so that the daemon's
// defaults apply to the rest.
func (o ForkOptions) wire() map[string]dbus.Variant {
	m := map[string]dbus.Variant{}
	if o.Count > 0 {
		m[sandboxd1.OptCount] = dbus.MakeVariant(uint32(o.Count))
	}
	if len(o.Names) > 0 {
		m[sandboxd1.OptNames] = dbus.MakeVariant(o.Names)
	}
	if len(o.Spawn) > 0 {
		m[sandboxd1.OptSpawn] = dbus.MakeVariant(o.Spawn)
	}
	return m
}

// ForkResult is what Fork made.
type ForkResult struct {
	// IDs are the forks' ids, in order (Client.Sandbox finds each).
	IDs []string
	// NotCarried are the command lines (argv joined by spaces) of the
	// sandbox's background processes that ran and were not carried into
	// the forks: start them again there (ForkOptions.Spawn) if needed.
	NotCarried []string
}

// Fork makes new sandboxes whose files and system are the sandbox's as
// they stand (it is frozen for the instant of the snapshots), each with
// its settings, owner and base, so that their diffs and promotions
// compare against the same project state. Processes are not carried: a
// fork starts with none but opts.Spawn's (a fork of a booted sandbox
// boots).
func (s *Sandbox) Fork(ctx context.Context, opts ForkOptions) (ForkResult, error) {
	op := "forking"
	if opts.Count < 0 {
		// The daemon bounds it above (MaxForks); below, uint32 would wrap.
		return ForkResult{}, newError(op+" "+s.label(), sandboxd1.ErrorInvalidArgs,
			"count %d: give 1 to %d forks", opts.Count, sandboxd1.MaxForks)
	}
	var r ForkResult
	if err := s.call(ctx, op, sandboxd1.MethodFork, []any{opts.wire()}, &r.IDs, &r.NotCarried); err != nil {
		return ForkResult{}, err
	}
	return r, nil
}
