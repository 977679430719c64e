package try_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/supervisor"
	"github.com/sandboxd/sandboxd/supervisor/try"
)

func TestTryKeepsTheFastestPassingVariant(t *testing.T) {
	e := newEnv(t)
	rep, err := e.try.Run(ctx, try.Options{
		Create: supervisor.CreateOptions{Project: "web", Name: "fix"},
		Variants: []string{
			"echo wrong > answer",
			"sleep 0.3; echo right > answer",
			"echo right > answer && echo note > NOTES",
			"exit 3",
		},
		Check: "grep -q right answer",
	})
	if err != nil {
		t.Fatal(err)
	}
	results, winner := rep.Results, rep.Winner
	if winner != 2 || !results[2].Passed || results[2].Changes == nil || *results[2].Changes != 2 || !results[2].Kept || !results[2].Winner {
		t.Fatalf("winner %d: %+v", winner, results)
	}
	if !results[1].Passed || results[1].Kept || results[0].Passed || results[0].Failed != "check: exited 1" || results[3].Failed != "variant: exited 3" {
		t.Fatalf("results: %+v", results)
	}
	// What the CLI shows: each step's end, output and time apart.
	if r := results[0]; r.FailedIn != "check" || r.How != "exited" || r.Status != 1 || r.CommandOutput == nil || r.CheckOutput == nil ||
		r.Duration != r.CommandDuration+r.CheckDuration {
		t.Fatalf("the failed check's result: %+v", r)
	}
	if r := results[3]; r.FailedIn != "variant" || r.Status != 3 || r.CheckOutput != nil {
		t.Fatalf("the failed variant's result (its check must not run): %+v", r)
	}
	list, _ := e.sup.List(ctx)
	if len(list) != 1 || list[0].Name != "fix-3" {
		t.Fatalf("sandboxes after Try: %+v", list)
	}
	if _, err := e.try.Run(ctx, try.Options{Create: supervisor.CreateOptions{Project: "web"}, Check: "true"}); !errors.Is(err, supervisor.ErrInvalid) {
		t.Fatalf("Try without variants: %v; want ErrInvalid", err)
	}
}

// TestTryGivesEachInputAndStepOptions: with inputs, one variant runs in
// a sandbox per input, which it and the check read in $SANDBOX_INPUT,
// with the environment, directory and timeout asked for; a step that
// runs too long is ended and fails the variant, not the Try.
func TestTryGivesEachInputAndStepOptions(t *testing.T) {
	e := newEnv(t)
	rep, err := e.try.Run(ctx, try.Options{
		Create:   supervisor.CreateOptions{Project: "web", Name: "in"},
		Variants: []string{`test "$SANDBOX_INPUT" != slow || sleep 30; echo "$GREETING $SANDBOX_INPUT in $PWD"`},
		Inputs:   []string{"a", "slow"},
		Check:    `test -n "$SANDBOX_INPUT"`,
		Env:      []string{"GREETING=hello"},
		Dir:      "/tmp",
		Timeout:  2 * time.Second,
		Keep:     "none",
	})
	if err != nil {
		t.Fatal(err)
	}
	a, slow := rep.Results[0], rep.Results[1]
	if !a.Passed || a.Input == nil || *a.Input != "a" || a.CommandOutput == nil || *a.CommandOutput != "hello a in /tmp\n" {
		t.Errorf("input a: %+v (output %q)", a, deref(a.CommandOutput))
	}
	if slow.Passed || slow.FailedIn != "variant" || slow.How != "timed-out" || rep.Winner != 0 {
		t.Errorf("the slow input: %+v, winner %d; want timed-out", slow, rep.Winner)
	}
	if list, _ := e.sup.List(ctx); len(list) != 0 {
		t.Errorf("sandboxes after Try with keep none: %+v", list)
	}
}

// TestTryStopsAtAnErrorAndDestroysWhatItMade: a name taken stops the Try
// (not a variant's failure); what it made goes, the other sandbox stays;
// a Try whose caller goes away (ctx ends) destroys its sandboxes too.
func TestTryStopsAtAnErrorAndDestroysWhatItMade(t *testing.T) {
	e := newEnv(t)
	if _, err := e.sup.Create(ctx, supervisor.CreateOptions{Project: "web", Name: "clash-2"}); err != nil {
		t.Fatal(err)
	}
	_, err := e.try.Run(ctx, try.Options{
		Create: supervisor.CreateOptions{Project: "web", Name: "clash"}, Parallel: 1,
		Variants: []string{"true", "true", "true"}, Check: "true",
	})
	if !errors.Is(err, supervisor.ErrExists) || !strings.HasSuffix(err.Error(), "; destroyed the sandboxes try made: clash-1") {
		t.Fatalf("Try with a name taken: %v; want ErrExists, saying clash-1 was destroyed", err)
	}
	if list, _ := e.sup.List(ctx); len(list) != 1 || list[0].Name != "clash-2" {
		t.Fatalf("sandboxes after the clash: %+v; want clash-2 alone", list)
	}

	gone := errors.New("the caller went away")
	cctx, cancel := context.WithCancelCause(ctx)
	time.AfterFunc(2*time.Second, func() { cancel(gone) })
	begin := time.Now()
	_, err = e.try.Run(cctx, try.Options{
		Create:   supervisor.CreateOptions{Project: "web", Name: "int"},
		Variants: []string{"sleep 60", "sleep 60"}, Check: "true",
	})
	if !errors.Is(err, gone) || !strings.Contains(err.Error(), "destroyed the sandboxes try made: int-1, int-2") || time.Since(begin) > 20*time.Second {
		t.Fatalf("Try cancelled: %v after %v; want it stopped, saying int-1 and int-2 were destroyed", err, time.Since(begin))
	}
	if list, _ := e.sup.List(ctx); len(list) != 1 {
		t.Fatalf("sandboxes after the cancelled Try: %+v; want clash-2 alone", list)
	}
}

func deref(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}
