package client

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/sandboxd/sandboxd/sandboxd1"
)

// TryOptions are how Try's sandboxes are made and its commands run.
type TryOptions struct {
	// Create is each sandbox's settings; its Name is the prefix of their
	// names (PREFIX-1, PREFIX-2, ...; "try-XXXX" when empty).
	Create CreateOptions
	// Env, Dir, Root and Detach apply to each variant and each check as
	// to an Exec.
	Env    []string
	Dir    string
	Root   bool
	Detach bool
	// Timeout bounds each variant and each check: 0 is the daemon's
	// default (10 minutes), a negative value none.
	Timeout time.Duration
	// Inputs, with one variant, make a sandbox per input, which the
	// variant and the check find in $SANDBOX_INPUT.
	Inputs []string
	// Parallel is the most sandboxes at work at once (0: 4).
	Parallel uint32
}

func (o TryOptions) options() map[string]dbus.Variant {
	m := o.Create.options()
	exec := ExecOptions{Env: o.Env, Dir: o.Dir, Root: o.Root, Detach: o.Detach}.options(true)
	for k, v := range exec {
		m[k] = v
	}
	switch {
	case o.Timeout > 0:
		m[sandboxd1.OptTimeoutUSec] = dbus.MakeVariant(micros(o.Timeout))
	case o.Timeout < 0:
		m[sandboxd1.OptTimeoutUSec] = dbus.MakeVariant(uint64(0))
	}
	if len(o.Inputs) > 0 {
		m[sandboxd1.OptInputs] = dbus.MakeVariant(o.Inputs)
	}
	if o.Parallel > 0 {
		m[sandboxd1.OptParallel] = dbus.MakeVariant(o.Parallel)
	}
	return m
}

// Try runs approaches side by side: a sandbox of project per variant (a
// shell line), the variant and then check run in each, and returns the
// report: each sandbox's result in order, and the winner, the passing
// one that took least time (Winner -1: none passed). keep says which
// sandboxes stay: sandboxd1.KeepWinner ("" too), KeepAll or KeepNone.
//
// The call lasts as long as the slowest sandbox. It runs on a connection
// of its own, which ends when ctx does: the daemon then stops the work
// and destroys what the call made (unless KeepAll).
func (c *Client) Try(ctx context.Context, project string, variants []string, check, keep string, opts TryOptions) (*sandboxd1.TryReport, error) {
	op := fmt.Sprintf("trying %d variants in project %q", len(variants), project)
	if keep == "" {
		keep = sandboxd1.KeepWinner
	}
	conn, err := dial(ctx)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	defer conn.Close()
	// godbus gives up on the call when ctx ends; closing the connection
	// (deferred) is what tells the daemon.
	var text string
	if err := call(ctx, conn.Object(sandboxd1.BusName, sandboxd1.ManagerPath), op, sandboxd1.ManagerInterface, sandboxd1.MethodTry,
		[]any{project, variants, check, keep, opts.options()}, &text); err != nil {
		return nil, err
	}
	var report sandboxd1.TryReport
	if err := json.Unmarshal([]byte(text), &report); err != nil {
		return nil, fmt.Errorf("%s: the daemon's report: %w", op, err)
	}
	return &report, nil
}
