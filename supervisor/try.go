package supervisor

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/runtime/nsinit"
)

// TryOptions ask for several sandboxes of one project, a variant each,
// and the same check in each: many approaches side by side, one winner.
type TryOptions struct {
	// Create is what each sandbox is made with (Project, Owner, limits,
	// profile...); its Name is the prefix of theirs: PREFIX-1...
	Create CreateOptions
	// Variants are shell lines, one per sandbox; Check the shell line
	// that must pass in each after its variant did.
	Variants []string
	Check    string
	// Timeout bounds each variant and each check (0: 10 minutes);
	// Parallel how many sandboxes work at once (0: 4).
	Timeout  time.Duration
	Parallel int
	// Keep is which sandboxes stay: "winner" (default), "all" or "none".
	Keep string
}

// TryResult is one sandbox's outcome.
type TryResult struct {
	Name, ID, Variant string
	// Passed: the variant and then the check exited 0. Failed says which
	// failed and how ("check: exited 1").
	Passed bool
	Failed string
	// Duration is the variant's and the check's time together.
	Duration time.Duration
	// Changes is how many paths it changed; MemoryPeak its memory peak
	// (bytes, 0 where the host does not tell).
	Changes    int
	MemoryPeak uint64
	Kept       bool
	Output     string // the end of the variant's and the check's output
}

// Try runs opts' variants side by side and returns each sandbox's result
// and the winner's index (-1: none passed): of those that passed, the one
// that took least time.
func (s *Supervisor) Try(ctx context.Context, opts TryOptions) ([]TryResult, int, error) {
	if len(opts.Variants) == 0 || opts.Check == "" {
		return nil, -1, fmt.Errorf("trying variants of %s: want at least one variant and a check: %w", opts.Create.Project, ErrInvalid)
	}
	switch opts.Keep {
	case "":
		opts.Keep = "winner"
	case "winner", "all", "none":
	default:
		return nil, -1, fmt.Errorf("trying variants of %s: keep %q: want winner, all or none: %w", opts.Create.Project, opts.Keep, ErrInvalid)
	}
	if opts.Timeout == 0 {
		opts.Timeout = defaultCheckTimeout
	}
	if opts.Parallel <= 0 {
		opts.Parallel = 4
	}
	prefix := opts.Create.Name
	if prefix == "" {
		prefix = prefixTry + newCommandID()[:4]
	}
	results := make([]TryResult, len(opts.Variants))
	errs := make([]error, len(opts.Variants))
	slots := make(chan struct{}, opts.Parallel)
	var wg sync.WaitGroup
	for i, variant := range opts.Variants {
		wg.Add(1)
		go func() {
			defer wg.Done()
			slots <- struct{}{}
			defer func() { <-slots }()
			results[i], errs[i] = s.tryOne(ctx, opts, fmt.Sprintf("%s-%d", prefix, i+1), variant)
		}()
	}
	wg.Wait()
	winner := -1
	for i, r := range results {
		if r.Passed && (winner < 0 || r.Duration < results[winner].Duration) {
			winner = i
		}
	}
	for i := range results {
		r := &results[i]
		if r.ID == "" {
			continue
		}
		r.Kept = opts.Keep == "all" || opts.Keep == "winner" && i == winner
		if !r.Kept {
			if err := s.Destroy(context.WithoutCancel(ctx), r.ID); err != nil {
				errs = append(errs, fmt.Errorf("destroying %s: %w", r.Name, err))
			}
		}
	}
	return results, winner, errors.Join(errs...)
}

// tryOne makes sandbox name, runs variant then the check in it, and
// measures it.
func (s *Supervisor) tryOne(ctx context.Context, opts TryOptions, name, variant string) (TryResult, error) {
	r := TryResult{Name: name, Variant: variant}
	co := opts.Create
	co.Name = name
	sb, err := s.Create(ctx, co)
	if err != nil {
		r.Failed = "create: " + err.Error()
		return r, fmt.Errorf("making %s: %w", name, err)
	}
	r.ID = sb.ID
	start := time.Now()
	for _, step := range []struct{ what, line string }{{"variant", variant}, {"check", opts.Check}} {
		res, err := s.runCheck(ctx, sb.ID, co.Owner, step.line, opts.Timeout)
		r.Output += res.Output
		if err != nil {
			r.Failed = step.what + ": " + err.Error()
			return r, fmt.Errorf("running the %s in %s: %w", step.what, name, err)
		}
		if res.How != string(nsinit.Exited) || res.Status != 0 {
			r.Failed = fmt.Sprintf("%s: %s %d", step.what, res.How, res.Status)
			break
		}
	}
	r.Duration = time.Since(start)
	r.Passed = r.Failed == ""
	if changes, err := s.Diff(ctx, sb.ID); err == nil {
		r.Changes = len(changes)
	}
	if in, err := s.Inspect(ctx, sb.ID, LiveUsage); err == nil && in.MemoryPeak.Known {
		r.MemoryPeak = in.MemoryPeak.Value
	}
	return r, nil
}
