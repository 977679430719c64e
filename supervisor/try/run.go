package try

import (
	"context"
	"fmt"
	"github.com/sandboxd/sandboxd/supervisor/commands"
	"slices"
	"time"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/runtime/nsinit"
	"github.com/sandboxd/sandboxd/supervisor"
	"github.com/sandboxd/sandboxd/supervisor/fork"
)

// Bounds of Try: what it keeps of each step's output, and how long a call
// it must not abandon half way (a create, a destroy) may take.
const (
	outputMax   = 64 << 10
	callTimeout = 5 * time.Minute
)

// make makes one of Try's sandboxes: a new one of the project, or a
// fork of opts.From.
func (t *Try) make(ctx context.Context, opts *Options, co supervisor.CreateOptions) (supervisor.Sandbox, error) {
	if opts.From == "" {
		return t.h.Create(ctx, co)
	}
	if t.forks == nil {
		return supervisor.Sandbox{}, fmt.Errorf("forking sandbox %s: this daemon makes no forks: %w", opts.From, supervisor.ErrInvalid)
	}
	res, err := t.forks.Fork(ctx, opts.From, fork.Options{Count: 1, Names: []string{co.Name}})
	if err != nil {
		return supervisor.Sandbox{}, err
	}
	return res.Sandboxes[0], nil
}

// one makes sandbox i, runs its variant and then the check in it, and
// reads what it changed and wrote and its memory peak. An error is not
// the variant's failure (that is in r): it stops the whole Try.
func (t *Try) one(ctx context.Context, opts *Options, r *Result) error {
	co := opts.Create
	co.Name = r.Name
	busy, err := opts.busy(ctx)
	if err != nil {
		return fmt.Errorf("making sandbox %s: %w", r.Name, err)
	}
	// Never abandoned half way: Try knows every sandbox it made.
	cctx, done := context.WithTimeout(context.WithoutCancel(ctx), callTimeout)
	sb, err := t.make(cctx, opts, co)
	done()
	busy()
	if err != nil {
		r.Failed = "create: " + err.Error()
		return fmt.Errorf("making sandbox %s: %w", r.Name, err)
	}
	r.ID = sb.ID
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	env := slices.Clip(opts.Env)
	if r.Input != nil {
		env = append(env, "SANDBOX_INPUT="+*r.Input)
	}
	for _, step := range []struct{ what, line string }{{"variant", r.Variant}, {"check", opts.Check}} {
		res, err := t.step(ctx, opts, sb.ID, step.line, env)
		if err != nil {
			r.Failed = step.what + ": " + err.Error()
			return fmt.Errorf("running the %s in %s: %w", step.what, r.Name, err)
		}
		r.Duration += res.Took
		if step.what == "variant" {
			r.CommandDuration, r.CommandOutput = res.Took, &res.Output
		} else {
			r.CheckDuration, r.CheckOutput = res.Took, &res.Output
		}
		if res.How != nsinit.Exited || res.Code != 0 {
			r.FailedIn, r.How, r.Signal = step.what, string(res.How), res.Signal
			r.Status = res.Code
			if res.How != nsinit.Exited {
				r.Status = res.ExitCode()
			}
			code := res.Code
			if res.Signal != 0 {
				code = 128 + res.Signal
			}
			r.Failed = fmt.Sprintf("%s: %s %d", step.what, res.How, code)
			break
		}
	}
	r.Passed = r.FailedIn == ""

	busy, err = opts.busy(ctx)
	if err != nil {
		return fmt.Errorf("reading what %s changed: %w", r.Name, err)
	}
	defer busy()
	var n, ignored int
	if err := t.h.WithChanges(ctx, sb.ID, "listing the changes of sandbox "+sb.ID, func(_, _ cowfs.Volume, c []cowfs.Change, i int) error {
		n, ignored = len(c), i
		return nil
	}); err == nil {
		r.Changes, r.Ignored = &n, ignored
	} else if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	in, err := t.h.Usage(ctx, sb.ID)
	if err != nil {
		return fmt.Errorf("reading the usage of %s: %w", r.Name, err)
	}
	if in.Disk.Known {
		r.DiskUsed = &in.Disk.Value
	}
	if in.MemoryPeak.Known {
		r.MemoryPeak = &in.MemoryPeak.Value
	}
	return nil
}

// step runs the shell line in sandbox id as the caller, and returns
// how it ended, the last outputMax bytes of its output and how long it
// took.
func (t *Try) step(ctx context.Context, opts *Options, id, line string, env []string) (commands.Captured, error) {
	timeout := opts.Timeout
	if timeout < 0 {
		timeout = 0 // none
	}
	c, err := t.run.RunCaptured(ctx, id, commands.ExecOptions{
		Argv: []string{"/bin/sh", "-c", line}, Env: env, Dir: opts.Dir,
		UID: opts.Create.Owner, AsRoot: opts.AsRoot, Detach: opts.Detach, Timeout: timeout,
	}, outputMax)
	if err != nil {
		return c, fmt.Errorf("running %q: %w", line, err)
	}
	return c, nil
}

// busy begins a piece of Try's heavy work (see Options.Busy).
func (o *Options) busy(ctx context.Context) (done func(), err error) {
	if o.Busy == nil {
		return func() {}, nil
	}
	return o.Busy(ctx)
}
