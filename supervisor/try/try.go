package try

import (
	"context"
	"fmt"
	"github.com/sandboxd/sandboxd/internal/randid"
	"github.com/sandboxd/sandboxd/supervisor/commands"
	"github.com/sandboxd/sandboxd/supervisor/fork"
	"strings"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/sandboxd1"
	"github.com/sandboxd/sandboxd/supervisor"
)

// Host is the core as this room needs it: supervisor.Host, and the usage
// of a sandbox (supervisor/host_try.go).
type Host interface {
	supervisor.Host
	// Usage is what sandbox id uses now: Inspect's LiveUsage.
	Usage(ctx context.Context, id string) (supervisor.Inspection, error)
}

// Config is what the room is made with.
type Config struct {
	// Runner runs each variant and check in its sandbox (the commands
	// room).
	Runner commands.Runner
	// Forks makes Options.From's forks (nil: From is refused).
	Forks *fork.Forks
}

// Try is the room: best-of-N over sandboxes of a project.
type Try struct {
	h     Host
	run   commands.Runner
	forks *fork.Forks
}

// New makes the room over h. It joins no hook: a Try's sandboxes are
// the core's like any other's, and a Try's state lives in its call.
func New(h Host, cfg Config) *Try {
	return &Try{h: h, run: cfg.Runner, forks: cfg.Forks}
}

// prefix names a Try's sandboxes when the caller gives no name,
// try-XXXX-N (a sandbox name, not a volume's).
const prefix = "try-"

// defaultTimeout bounds each step when Options.Timeout is 0, as a
// promotion's checks are bounded.
const defaultTimeout = sandboxd1.DefaultTryTimeout

// Options ask for several sandboxes of one project, a variant each,
// and the same check in each: many approaches side by side, one winner.
type Options struct {
	// Create is what each sandbox is made with (Project, Owner, limits,
	// profile...); its Name is the prefix of theirs: PREFIX-1...
	Create supervisor.CreateOptions
	// From, if set, is a sandbox's id: each sandbox is a fork of it (its
	// files, system layer and options as they stand) rather than a new
	// sandbox of Create.Project; of Create only Name counts.
	From string
	// Variants are shell lines, one per sandbox; Check the shell line
	// that must pass in each after its variant did. With Inputs there is
	// one variant, and a sandbox per input, which the variant and the
	// check find in $SANDBOX_INPUT.
	Variants []string
	Inputs   []string
	Check    string
	// Env, Dir, AsRoot and Detach are each step's, as Exec's.
	Env    []string
	Dir    string
	AsRoot bool
	Detach bool
	// Timeout bounds each variant and each check (0: 10 minutes;
	// NoTimeout: none); Parallel how many sandboxes work at once (0: 4).
	Timeout  time.Duration
	Parallel int
	// Keep is which sandboxes stay: "winner" (default), "all" or "none".
	Keep string
	// Busy, if set, is called before each piece of Try's own heavy work
	// (a sandbox's create; its diff and usage), and what it returns after.
	// Between them Try only waits on its sandboxes' processes (variants
	// and checks, bounded by the sandboxes' limits and Timeout): the API
	// then gives the call's place among all heavy calls back, so that
	// Trys with no timeout cannot keep others from theirs.
	Busy func(ctx context.Context) (done func(), err error)
	// Done, if set, is called as each sandbox is done (its variant and
	// check ended, its changes and usage read), from the goroutine that
	// ran it, before Run returns: prefix is its name's (PREFIX-N), i its
	// place in Report.Results, r its result but Winner and Kept (decided
	// at the end). It must not block for long: the sandbox's worker
	// waits.
	Done func(prefix string, i int, r Result)
}

// NoTimeout as Options.Timeout leaves the steps unbounded.
const NoTimeout time.Duration = -1

// Result is one sandbox's outcome.
type Result struct {
	Name, ID, Variant string
	Input             *string // with Inputs: this sandbox's
	// Passed: the variant and then the check exited 0. Failed says which
	// failed and how ("check: exited 1"); FailedIn is that step
	// ("variant" or "check"), How, Status and Signal its end, as
	// CommandExited tells it.
	Passed        bool
	Failed        string
	FailedIn, How string
	Status        int
	Signal        int
	// Duration is the variant's and the check's time together.
	Duration, CommandDuration, CheckDuration time.Duration
	// Changes is how many paths it changed (nil: the pool cannot tell);
	// DiskUsed what it wrote (bytes, nil: not accounted); MemoryPeak its
	// memory peak once the check ended (bytes, nil: not counted).
	Changes *int
	// Ignored is how many changed paths the project's ignore rules left
	// out of Changes.
	Ignored              int
	DiskUsed, MemoryPeak *uint64
	Winner, Kept         bool
	// CommandOutput and CheckOutput are the last 64 KiB of each step's
	// output (nil: the step did not run).
	CommandOutput, CheckOutput *string
}

// Report is a whole Try: each sandbox's result, the winner's index
// (-1: none passed) and the sandboxes it could not destroy.
type Report struct {
	Results []Result
	Winner  int
	Left    []string
}

// Run runs opts' variants side by side and reports each sandbox's result
// and the winner: of those that passed, the one that took least time (the
// earlier on a tie). The first error that is not a variant's failure (a
// name taken, ctx ending: its caller went away) stops every sandbox's
// work; Try then destroys every sandbox it made (unless Keep is "all")
// and returns the error, saying what became of them.
func (t *Try) Run(ctx context.Context, opts Options) (Report, error) {
	rep := Report{Winner: -1}
	if err := opts.check(); err != nil {
		return rep, err
	}
	name := opts.Create.Name
	if name == "" {
		name = prefix + randomTag()
	}
	rep.Results = make([]Result, max(len(opts.Variants), len(opts.Inputs)))
	for i := range rep.Results {
		r := &rep.Results[i]
		r.Name, r.Variant = fmt.Sprintf("%s-%d", name, i+1), opts.Variants[min(i, len(opts.Variants)-1)]
		if len(opts.Inputs) > 0 {
			r.Input = &opts.Inputs[i]
		}
	}

	err := t.all(ctx, &opts, name, rep.Results)
	if err != nil {
		// Nothing is decided: every sandbox made goes, unless all stay.
		gone, left := t.cleanUp(ctx, rep.Results, opts.Parallel, func(*Result) bool { return opts.Keep != "all" })
		rep.Left = left
		if what := cleanUpText(rep.Results, gone, left, opts.Keep == "all"); what != "" {
			err = fmt.Errorf("%w; %s", err, what)
		}
		return rep, err
	}
	for i, r := range rep.Results {
		if r.Passed && (rep.Winner < 0 || r.Duration < rep.Results[rep.Winner].Duration) {
			rep.Winner = i
		}
	}
	if rep.Winner >= 0 {
		rep.Results[rep.Winner].Winner = true
	}
	_, rep.Left = t.cleanUp(ctx, rep.Results, opts.Parallel, func(r *Result) bool {
		return opts.Keep == "none" || opts.Keep == "winner" && !r.Winner
	})
	return rep, nil
}

// check validates opts and fills in the defaults.
func (o *Options) check() error {
	what := "trying variants of " + o.Create.Project
	switch {
	case len(o.Variants) == 0 || strings.TrimSpace(o.Check) == "":
		return fmt.Errorf("%s: want at least one variant and a check: %w", what, supervisor.ErrInvalid)
	case len(o.Inputs) > 0 && len(o.Variants) != 1:
		return fmt.Errorf("%s: inputs give one command different inputs: want one variant with them, not %d: %w", what, len(o.Variants), supervisor.ErrInvalid)
	case o.Parallel < 0:
		return fmt.Errorf("%s: parallel %d: want 1 or more: %w", what, o.Parallel, supervisor.ErrInvalid)
	}
	for _, v := range o.Variants {
		if strings.TrimSpace(v) == "" {
			return fmt.Errorf("%s: a variant is empty: give each a command: %w", what, supervisor.ErrInvalid)
		}
	}
	switch o.Keep {
	case "":
		o.Keep = "winner"
	case "winner", "all", "none":
	default:
		return fmt.Errorf("%s: keep %q: want winner, all or none: %w", what, o.Keep, supervisor.ErrInvalid)
	}
	if o.Timeout == 0 {
		o.Timeout = defaultTimeout
	}
	if o.Parallel == 0 {
		o.Parallel = 4
	}
	return nil
}

// all makes, runs and checks every sandbox, at most opts.Parallel at
// once, in the order given, telling opts.Done of each as it is done
// (prefix: their names'). The first error cancels the others' work.
func (t *Try) all(ctx context.Context, opts *Options, prefix string, results []Result) error {
	work, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var (
		mu    sync.Mutex
		first error
		wg    sync.WaitGroup
	)
	next := make(chan int, len(results))
	for i := range results {
		next <- i
	}
	close(next)
	for range min(opts.Parallel, len(results)) {
		wg.Go(func() {
			for i := range next {
				if work.Err() != nil {
					return
				}
				if err := t.one(work, opts, &results[i]); err != nil {
					mu.Lock()
					if first == nil && work.Err() == nil {
						first = err
					}
					mu.Unlock()
					cancel(err)
					return
				}
				if opts.Done != nil {
					opts.Done(prefix, i, results[i])
				}
			}
		})
	}
	wg.Wait()
	if first == nil && ctx.Err() != nil {
		return fmt.Errorf("trying variants of %s: stopped: %w", opts.Create.Project, context.Cause(ctx))
	}
	return first
}

// cleanUp destroys the sandboxes made that goes says go, a few at a
// time, on a context of their own (ctx may have ended), and marks the
// others kept. It returns the names destroyed and those that could not
// be.
func (t *Try) cleanUp(ctx context.Context, results []Result, parallel int, goes func(*Result) bool) (gone, left []string) {
	var doomed []*Result
	for i := range results {
		r := &results[i]
		switch {
		case r.ID == "":
		case goes(r):
			doomed = append(doomed, r)
		default:
			r.Kept = true
		}
	}
	cctx, done := context.WithTimeout(context.WithoutCancel(ctx), callTimeout)
	defer done()
	errs := make([]error, len(doomed))
	sem := make(chan struct{}, max(parallel, 1))
	var wg sync.WaitGroup
	for i, r := range doomed {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			errs[i] = t.h.Destroy(cctx, r.ID)
		})
	}
	wg.Wait()
	for i, r := range doomed {
		if errs[i] == nil {
			gone = append(gone, r.Name)
			continue
		}
		r.Kept = true // it is there still
		left = append(left, r.Name)
		t.h.Log().Error("destroying a sandbox of Try", "sandbox", r.ID, "name", r.Name, "error", errs[i])
	}
	return gone, left
}

// cleanUpText says what became of the sandboxes made, after an
// interruption or an error ("" when none was made).
func cleanUpText(results []Result, gone, left []string, keptAll bool) string {
	var made []string
	for _, r := range results {
		if r.ID != "" {
			made = append(made, r.Name)
		}
	}
	switch {
	case len(made) == 0:
		return ""
	case len(left) > 0:
		return fmt.Sprintf("could not destroy %s: destroy them with `sandboxctl destroy %s`",
			strings.Join(left, ", "), strings.Join(left, " "))
	case keptAll:
		return "kept (keep all) " + strings.Join(made, ", ")
	}
	return "destroyed the sandboxes try made: " + strings.Join(gone, ", ")
}

// randomTag is four hex digits that tell apart the sandboxes of Trys
// their callers did not name.
func randomTag() string {
	return randid.Hex(2)
}
