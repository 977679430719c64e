package try_test

// The room's logic without root: over hosttest with a pool of plain
// directories (cowfsfake) and a fake Runner whose commands end as each
// test says, after the time it says.

import (
	"context"
	"errors"
	"github.com/sandboxd/sandboxd/supervisor/commands"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/runtime/nsinit"
	"github.com/sandboxd/sandboxd/supervisor"
	"github.com/sandboxd/sandboxd/supervisor/try"
)

// write is a variant's writes into sandbox id's copy.
func write(f *fakeHost, id string, files map[string]string) error {
	dir, err := f.path(id)
	if err != nil {
		return err
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// Of the sandboxes whose variant and check passed, the fastest wins and
// stays (keep winner); the others go. Each result tells which step failed
// and how, each step's output and time, and the paths changed less those
// the ignore rules leave out; the commands run as the owner, with the
// default timeout, their output's last 64 KiB kept.
func TestUnitTryKeepsTheFastestPassingVariant(t *testing.T) {
	run := &runner{}
	room, f := newUnit(t, run)
	f.Ignore = func(c cowfs.Change) bool { return strings.HasSuffix(c.Path, ".log") }
	run.fn = func(_ context.Context, id string, o commands.ExecOptions) (commands.Captured, error) {
		switch line(o) {
		case "wrong":
			return exited(0, 10*time.Millisecond, "w\n"), write(f, id, map[string]string{"answer": "wrong"})
		case "slow right":
			return exited(0, 300*time.Millisecond, ""), write(f, id, map[string]string{"answer": "right"})
		case "right and a note":
			return exited(0, 100*time.Millisecond, ""), write(f, id, map[string]string{"answer": "right", "NOTES": "n", "build.log": "l"})
		case "exit 3":
			return exited(3, time.Millisecond, "no\n"), nil
		case "check":
			dir, err := f.path(id)
			if err != nil {
				return commands.Captured{}, err
			}
			if b, _ := os.ReadFile(filepath.Join(dir, "answer")); string(b) == "right" {
				return exited(0, 5*time.Millisecond, ""), nil
			}
			return exited(1, 5*time.Millisecond, "wrong answer\n"), nil
		}
		t.Errorf("ran %q", line(o))
		return exited(127, 0, ""), nil
	}
	rep, err := room.Run(ctx, try.Options{
		Create:   supervisor.CreateOptions{Project: "web", Name: "fix", Owner: 1000},
		Variants: []string{"wrong", "slow right", "right and a note", "exit 3"},
		Check:    "check",
	})
	if err != nil {
		t.Fatal(err)
	}
	results := rep.Results
	if rep.Winner != 2 || len(rep.Left) != 0 {
		t.Fatalf("winner %d, left %q: %+v", rep.Winner, rep.Left, results)
	}
	if r := results[2]; !r.Passed || !r.Winner || !r.Kept || r.Changes == nil || *r.Changes != 2 || r.Ignored != 1 ||
		r.DiskUsed == nil || *r.DiskUsed == 0 || r.MemoryPeak != nil || r.Duration != 105*time.Millisecond {
		t.Fatalf("the winner: %+v", r)
	}
	if r := results[1]; !r.Passed || r.Winner || r.Kept {
		t.Fatalf("the slower that passed: %+v", r)
	}
	if r := results[0]; r.Passed || r.Kept || r.Failed != "check: exited 1" || r.FailedIn != "check" || r.How != "exited" || r.Status != 1 ||
		r.CommandOutput == nil || *r.CommandOutput != "w\n" || r.CheckOutput == nil || *r.CheckOutput != "wrong answer\n" ||
		r.CommandDuration != 10*time.Millisecond || r.CheckDuration != 5*time.Millisecond || r.Duration != r.CommandDuration+r.CheckDuration {
		t.Fatalf("the failed check's result: %+v", r)
	}
	if r := results[3]; r.Failed != "variant: exited 3" || r.FailedIn != "variant" || r.Status != 3 || r.CheckOutput != nil || r.Kept {
		t.Fatalf("the failed variant's result (its check must not run): %+v", r)
	}
	for i, r := range results {
		if want := "fix-" + string(rune('1'+i)); r.Name != want || r.Variant == "" || r.ID == "" {
			t.Errorf("result %d: name %q id %q, want %s", i, r.Name, r.ID, want)
		}
	}
	if got := f.names(t); len(got) != 1 || !got["fix-3"] {
		t.Fatalf("sandboxes after Try: %v, want fix-3 alone", got)
	}
	calls := run.all()
	if len(calls) != 7 { // four variants, three checks
		t.Fatalf("%d commands run, want 7: %+v", len(calls), calls)
	}
	for _, c := range calls {
		if c.Opts.UID != 1000 || c.Opts.Timeout != 10*time.Minute || c.Max != 64<<10 || c.Opts.AsRoot || c.Opts.Detach {
			t.Errorf("a step ran with %+v (max %d); want the owner's, 10 minutes, 64 KiB", c.Opts, c.Max)
		}
	}
}

// On a tie the earlier wins; with keep all every sandbox stays, those
// that failed too; with keep none none does, the winner still named.
func TestUnitTryKeepsAsAskedAndTiesGoToTheEarlier(t *testing.T) {
	for _, keep := range []string{"all", "none"} {
		run := &runner{fn: func(_ context.Context, _ string, o commands.ExecOptions) (commands.Captured, error) {
			if line(o) == "false" {
				return exited(1, 0, ""), nil
			}
			return exited(0, 20*time.Millisecond, ""), nil
		}}
		room, f := newUnit(t, run)
		rep, err := room.Run(ctx, try.Options{
			Create:   supervisor.CreateOptions{Project: "web", Name: "k"},
			Variants: []string{"false", "a", "b"}, Check: "true", Keep: keep,
		})
		if err != nil {
			t.Fatal(err)
		}
		if rep.Winner != 1 || !rep.Results[1].Winner || rep.Results[2].Winner {
			t.Errorf("keep %s: winner %d: %+v; want the earlier of the tie, k-2", keep, rep.Winner, rep.Results)
		}
		names := f.names(t)
		for _, r := range rep.Results {
			if r.Kept != (keep == "all") || names[r.Name] != (keep == "all") {
				t.Errorf("keep %s: %s kept %v, there %v", keep, r.Name, r.Kept, names[r.Name])
			}
		}
	}
}

// Parallel bounds how many sandboxes work at once, and the bound is
// reached (4 when not given); each sandbox is made, run and checked by
// one worker.
func TestUnitTryRunsVariantsInParallelWithinTheBound(t *testing.T) {
	for _, c := range []struct{ parallel, want int }{{2, 2}, {0, 4}, {1, 1}} {
		var inflight, most atomic.Int32
		run := &runner{fn: func(_ context.Context, _ string, o commands.ExecOptions) (commands.Captured, error) {
			n := inflight.Add(1)
			defer inflight.Add(-1)
			for {
				m := most.Load()
				if n <= m || most.CompareAndSwap(m, n) {
					break
				}
			}
			// The first variants wait for each other until the bound is
			// reached once, so that a Try that ran them one by one fails.
			for deadline := time.Now().Add(5 * time.Second); line(o) != "check" && most.Load() < int32(c.want) && time.Now().Before(deadline); {
				time.Sleep(time.Millisecond)
			}
			time.Sleep(20 * time.Millisecond) // long enough for more at once to show
			return exited(0, time.Millisecond, ""), nil
		}}
		room, _ := newUnit(t, run)
		rep, err := room.Run(ctx, try.Options{
			Create:   supervisor.CreateOptions{Project: "web", Name: "p"},
			Variants: []string{"1", "2", "3", "4", "5", "6", "7", "8"}, Check: "check", Parallel: c.parallel, Keep: "none",
		})
		if err != nil {
			t.Fatal(err)
		}
		if got := most.Load(); got != int32(c.want) {
			t.Errorf("parallel %d: at most %d commands at once, want %d", c.parallel, got, c.want)
		}
		for _, r := range rep.Results {
			if !r.Passed {
				t.Errorf("parallel %d: %+v did not pass", c.parallel, r)
			}
		}
	}
}

// A name taken stops the Try (it is not a variant's failure): what it
// made goes, unless keep all, and the error says so; the sandbox of that
// name is not its own and stays.
func TestUnitTryStopsAtANameTakenAndDestroysWhatItMade(t *testing.T) {
	for _, keep := range []string{"winner", "all"} {
		run := &runner{fn: func(context.Context, string, commands.ExecOptions) (commands.Captured, error) {
			return exited(0, 0, ""), nil
		}}
		room, f := newUnit(t, run)
		if _, err := f.Create(ctx, supervisor.CreateOptions{Project: "web", Name: "clash-2"}); err != nil {
			t.Fatal(err)
		}
		rep, err := room.Run(ctx, try.Options{
			Create: supervisor.CreateOptions{Project: "web", Name: "clash"}, Parallel: 1, Keep: keep,
			Variants: []string{"true", "true", "true"}, Check: "true",
		})
		want := "; destroyed the sandboxes try made: clash-1"
		if keep == "all" {
			want = "; kept (keep all) clash-1"
		}
		if !errors.Is(err, supervisor.ErrExists) || !strings.HasSuffix(err.Error(), want) || !strings.Contains(err.Error(), "making sandbox clash-2") {
			t.Fatalf("keep %s: Try with a name taken: %v; want ErrExists, ending %q", keep, err, want)
		}
		if !strings.HasPrefix(rep.Results[1].Failed, "create: ") || rep.Results[2].ID != "" || rep.Winner != -1 {
			t.Errorf("keep %s: results %+v; want clash-2's create failed, clash-3 never made, no winner", keep, rep.Results)
		}
		if got := f.names(t); len(got) != map[string]int{"winner": 1, "all": 2}[keep] || !got["clash-2"] || got["clash-1"] != (keep == "all") {
			t.Fatalf("keep %s: sandboxes after the clash: %v", keep, got)
		}
	}
}

// A Try whose caller goes away (ctx ends, with a cause) stops its
// sandboxes' steps and destroys every sandbox it made, saying so.
func TestUnitTryCancelledDestroysItsSandboxes(t *testing.T) {
	var started sync.WaitGroup
	started.Add(2)
	run := &runner{fn: func(ctx context.Context, _ string, _ commands.ExecOptions) (commands.Captured, error) {
		started.Done()
		<-ctx.Done()
		return commands.Captured{}, context.Cause(ctx)
	}}
	room, f := newUnit(t, run)
	gone := errors.New("the caller went away")
	cctx, cancel := context.WithCancelCause(ctx)
	go func() { started.Wait(); cancel(gone) }()
	begin := time.Now()
	rep, err := room.Run(cctx, try.Options{
		Create:   supervisor.CreateOptions{Project: "web", Name: "int"},
		Variants: []string{"sleep 60", "sleep 60"}, Check: "true", Timeout: try.NoTimeout,
	})
	if !errors.Is(err, gone) || !strings.Contains(err.Error(), "stopped") ||
		!strings.HasSuffix(err.Error(), "destroyed the sandboxes try made: int-1, int-2") || time.Since(begin) > 10*time.Second {
		t.Fatalf("Try cancelled: %v after %v; want it stopped, saying int-1 and int-2 were destroyed", err, time.Since(begin))
	}
	if got := f.names(t); len(got) != 0 || len(rep.Left) != 0 {
		t.Fatalf("sandboxes after the cancelled Try: %v, left %q; want none", got, rep.Left)
	}
	for _, c := range run.all() {
		if c.Opts.Timeout != 0 {
			t.Errorf("a step of a Try with no timeout ran with %v", c.Opts.Timeout)
		}
	}
}

// A sandbox Try could not destroy is kept, named in Left and, after an
// error, in the error with the command that destroys it.
func TestUnitTryNamesWhatItCouldNotDestroy(t *testing.T) {
	run := &runner{fn: func(_ context.Context, _ string, o commands.ExecOptions) (commands.Captured, error) {
		return exited(0, 0, ""), nil
	}}
	room, f := newUnit(t, run)
	f.failDestroy = func(name string) error {
		if name == "d-2" {
			return errors.New("busy")
		}
		return nil
	}
	rep, err := room.Run(ctx, try.Options{
		Create:   supervisor.CreateOptions{Project: "web", Name: "d"},
		Variants: []string{"a", "b"}, Check: "true", Keep: "none",
	})
	if err != nil || !slices.Equal(rep.Left, []string{"d-2"}) || rep.Results[0].Kept || !rep.Results[1].Kept {
		t.Fatalf("keep none with d-2 stuck: %v, left %q, %+v", err, rep.Left, rep.Results)
	}

	room, f = newUnit(t, run)
	f.failDestroy = func(string) error { return errors.New("busy") }
	f.CreateFn = func(ctx context.Context, opts supervisor.CreateOptions) (supervisor.Sandbox, error) {
		if opts.Name == "e-2" {
			return supervisor.Sandbox{}, supervisor.ErrAccessDenied
		}
		return f.create(ctx, opts)
	}
	rep, err = room.Run(ctx, try.Options{
		Create:   supervisor.CreateOptions{Project: "web", Name: "e"},
		Variants: []string{"a", "b"}, Check: "true", Parallel: 1,
	})
	if !errors.Is(err, supervisor.ErrAccessDenied) || !strings.HasSuffix(err.Error(), "could not destroy e-1: destroy them with `sandboxctl destroy e-1`") ||
		!slices.Equal(rep.Left, []string{"e-1"}) || !rep.Results[0].Kept {
		t.Fatalf("an error, e-1 stuck: %v, left %q, %+v", err, rep.Left, rep.Results)
	}
}

// With inputs, one variant runs in a sandbox per input, which it and the
// check find in $SANDBOX_INPUT after the caller's environment; each step
// gets the directory, root, detach and timeout asked for. Unnamed, the
// sandboxes are try-XXXX-N, one XXXX for the Try.
func TestUnitTryGivesEachInputAndStepOptions(t *testing.T) {
	run := &runner{fn: func(context.Context, string, commands.ExecOptions) (commands.Captured, error) {
		return exited(0, 0, ""), nil
	}}
	room, _ := newUnit(t, run)
	rep, err := room.Run(ctx, try.Options{
		Create:   supervisor.CreateOptions{Project: "web"},
		Variants: []string{"v"}, Inputs: []string{"a", "b"}, Check: "c",
		Env: []string{"GREETING=hello"}, Dir: "/tmp", AsRoot: true, Detach: true, Timeout: 2 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	named := regexp.MustCompile(`^(try-[0-9a-f]{4})-([12])$`)
	m1, m2 := named.FindStringSubmatch(rep.Results[0].Name), named.FindStringSubmatch(rep.Results[1].Name)
	if m1 == nil || m2 == nil || m1[1] != m2[1] || m1[2] != "1" || m2[2] != "2" {
		t.Errorf("unnamed Try's sandboxes: %q and %q", rep.Results[0].Name, rep.Results[1].Name)
	}
	byID := map[string]string{}
	for _, r := range rep.Results {
		if r.Input == nil || r.Variant != "v" {
			t.Fatalf("result %+v: want an input and the one variant", r)
		}
		byID[r.ID] = *r.Input
	}
	calls := run.all()
	if len(calls) != 4 {
		t.Fatalf("%d commands run, want a variant and a check per input", len(calls))
	}
	for _, c := range calls {
		want := []string{"GREETING=hello", "SANDBOX_INPUT=" + byID[c.ID]}
		if !slices.Equal(c.Opts.Env, want) || c.Opts.Dir != "/tmp" || !c.Opts.AsRoot || !c.Opts.Detach || c.Opts.Timeout != 2*time.Second {
			t.Errorf("a step in %s ran with %+v; want env %q and the options asked", c.ID, c.Opts, want)
		}
	}
}

// What is asked wrong is refused (ErrInvalid) before any sandbox is made.
func TestUnitTryRefusesWhatIsAskedWrong(t *testing.T) {
	run := &runner{fn: func(context.Context, string, commands.ExecOptions) (commands.Captured, error) {
		return exited(0, 0, ""), nil
	}}
	room, f := newUnit(t, run)
	web := supervisor.CreateOptions{Project: "web"}
	for what, o := range map[string]try.Options{
		"no variant":             {Create: web, Check: "true"},
		"no check":               {Create: web, Variants: []string{"true"}, Check: " "},
		"inputs with 2 variants": {Create: web, Variants: []string{"a", "b"}, Inputs: []string{"x"}, Check: "true"},
		"a negative parallel":    {Create: web, Variants: []string{"a"}, Check: "true", Parallel: -1},
		"an empty variant":       {Create: web, Variants: []string{"a", "\t"}, Check: "true"},
		"keep best":              {Create: web, Variants: []string{"a"}, Check: "true", Keep: "best"},
	} {
		if _, err := room.Run(ctx, o); !errors.Is(err, supervisor.ErrInvalid) {
			t.Errorf("%s: %v; want ErrInvalid", what, err)
		}
	}
	if len(f.created) != 0 || len(run.all()) != 0 {
		t.Fatalf("made %q and ran %d commands for calls refused", f.created, len(run.all()))
	}
}

// Try holds its heavy call's place (Busy) only for its own work, a
// sandbox's create and its diff and usage, not while its steps run; a
// place refused stops the Try. A call that names no actor is refused by
// the core's create.
func TestUnitTryHoldsItsPlaceOnlyForItsOwnWork(t *testing.T) {
	var held atomic.Int32
	var begun atomic.Int32
	run := &runner{fn: func(context.Context, string, commands.ExecOptions) (commands.Captured, error) {
		if held.Load() != 0 {
			t.Error("a step ran with Try's place held")
		}
		return exited(0, 0, ""), nil
	}}
	room, f := newUnit(t, run)
	busy := func(context.Context) (func(), error) {
		begun.Add(1)
		held.Add(1)
		return func() { held.Add(-1) }, nil
	}
	if _, err := room.Run(ctx, try.Options{
		Create: supervisor.CreateOptions{Project: "web", Name: "b"}, Variants: []string{"a", "b"}, Check: "true", Busy: busy,
		Parallel: 1, // one sandbox at a time: another's create holds no place while a step runs
	}); err != nil {
		t.Fatal(err)
	}
	if begun.Load() != 4 || held.Load() != 0 {
		t.Fatalf("Busy begun %d times, %d held after; want 2 per sandbox, none held", begun.Load(), held.Load())
	}

	full := errors.New("too many heavy calls")
	_, err := room.Run(ctx, try.Options{
		Create: supervisor.CreateOptions{Project: "web", Name: "full"}, Variants: []string{"a"}, Check: "true",
		Busy: func(context.Context) (func(), error) { return nil, full },
	})
	if !errors.Is(err, full) || !strings.Contains(err.Error(), "making sandbox full-1") || f.names(t)["full-1"] {
		t.Fatalf("Try refused its place: %v", err)
	}

	_, err = room.Run(context.Background(), try.Options{
		Create: supervisor.CreateOptions{Project: "web", Name: "anon"}, Variants: []string{"a"}, Check: "true",
	})
	if !errors.Is(err, supervisor.ErrNoActor) || f.names(t)["anon-1"] {
		t.Fatalf("Try with no actor: %v; want ErrNoActor, nothing made", err)
	}
}

// A step the init could not run (not a variant's failure) stops the Try;
// a pool that cannot list changes leaves Changes unknown; a step that
// timed out or was killed fails its variant with how it ended.
func TestUnitTryTellsHowAStepEnded(t *testing.T) {
	run := &runner{fn: func(_ context.Context, _ string, o commands.ExecOptions) (commands.Captured, error) {
		switch line(o) {
		case "slow":
			return commands.Captured{Result: nsinit.Result{How: nsinit.TimedOut}, Took: time.Second}, nil
		case "killed":
			return commands.Captured{Result: nsinit.Result{How: nsinit.Signaled, Signal: 9}}, nil
		case "lost":
			return commands.Captured{}, errors.New("the init is gone")
		}
		return exited(0, 0, ""), nil
	}}
	room, f := newUnit(t, run)
	f.pool.Fail("Changes", "", errors.New("no change list"))
	rep, err := room.Run(ctx, try.Options{
		Create:   supervisor.CreateOptions{Project: "web", Name: "h"},
		Variants: []string{"slow", "killed", "true"}, Check: "true", Keep: "none",
	})
	if err != nil {
		t.Fatal(err)
	}
	if r := rep.Results[0]; r.Passed || r.FailedIn != "variant" || r.How != "timed-out" || r.Failed != "variant: timed-out 0" {
		t.Errorf("the step that timed out: %+v", r)
	}
	if r := rep.Results[1]; r.FailedIn != "variant" || r.How != "signaled" || r.Signal != 9 || r.Failed != "variant: signaled 137" {
		t.Errorf("the step killed: %+v", r)
	}
	if r := rep.Results[2]; !r.Passed || r.Changes != nil || rep.Winner != 2 {
		t.Errorf("a pool with no change list: %+v, winner %d; want it passed, changes unknown", r, rep.Winner)
	}

	_, err = room.Run(ctx, try.Options{
		Create:   supervisor.CreateOptions{Project: "web", Name: "l"},
		Variants: []string{"lost"}, Check: "true",
	})
	if err == nil || !strings.Contains(err.Error(), `running the variant in l-1: running "lost": the init is gone`) ||
		!strings.HasSuffix(err.Error(), "destroyed the sandboxes try made: l-1") {
		t.Fatalf("a step that could not run: %v", err)
	}
}
