package client

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
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
	// From, if set, is a sandbox (its id or name): each variant runs in
	// a fork of it rather than in a new sandbox of the project.
	From string
	// OnVariant, if set, is called as each sandbox is done (its variant
	// and check ended), in the order they end, one call at a time, each
	// before Try returns: the daemon's TryVariantDone, which it sends to
	// this call alone. The report still has every result, its winner and
	// output.
	OnVariant func(sandboxd1.TryVariant)
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
	if o.From != "" {
		m[sandboxd1.OptFrom] = dbus.MakeVariant(o.From)
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
	if opts.OnVariant != nil {
		stop, err := watchVariants(ctx, conn, max(len(variants), len(opts.Inputs)), opts.OnVariant)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", op, err)
		}
		// Deferred after conn.Close, so run first: the signals that came
		// before the reply are told before Try returns.
		defer stop()
	}
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

// watchVariants calls on with each TryVariantDone the daemon sends conn,
// a connection of one Try's own, until stop, which tells those that came
// before it first. Only sandboxd's are taken (anyone may send a signal):
// the sender must own org.sandboxd1 as the watch begins.
func watchVariants(ctx context.Context, conn *dbus.Conn, n int, on func(sandboxd1.TryVariant)) (stop func(), err error) {
	var daemon string
	if err := conn.BusObject().CallWithContext(ctx, getNameOwner, 0, sandboxd1.BusName).Store(&daemon); err != nil {
		return nil, wrap("finding the daemon on the bus", err)
	}
	match := []dbus.MatchOption{dbus.WithMatchObjectPath(sandboxd1.ManagerPath), dbus.WithMatchInterface(sandboxd1.ManagerInterface),
		dbus.WithMatchMember(sandboxd1.SignalTryVariantDone), dbus.WithMatchSender(sandboxd1.BusName)}
	// Room for every sandbox's, and a few others': godbus hands a full
	// channel's signals over out of order.
	signals := make(chan *dbus.Signal, n+16)
	conn.Signal(signals)
	if err := conn.AddMatchSignalContext(ctx, match...); err != nil {
		conn.RemoveSignal(signals)
		return nil, wrap("watching for the variants' ends", err)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	tell := func(s *dbus.Signal) {
		if s.Sender != daemon || s.Name != sandboxd1.ManagerInterface+"."+sandboxd1.SignalTryVariantDone || len(s.Body) != 2 {
			return
		}
		text, _ := s.Body[1].(string)
		var v sandboxd1.TryVariant
		if json.Unmarshal([]byte(text), &v) == nil {
			on(v)
		}
	}
	wg.Go(func() {
		for {
			select {
			case s := <-signals:
				tell(s)
			case <-done:
				for {
					select {
					case s := <-signals:
						tell(s)
					default:
						return
					}
				}
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
		conn.RemoveSignal(signals)
	}, nil
}
