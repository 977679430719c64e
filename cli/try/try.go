package try

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	ucli "github.com/urfave/cli/v3"

	"github.com/sandboxd/sandboxd/cli/commands"
	"github.com/sandboxd/sandboxd/cli/sandboxes"
	"github.com/sandboxd/sandboxd/cli/verb"
	sbclient "github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/internal/randid"
	"github.com/sandboxd/sandboxd/sandboxd1"
)

// tryGoneWait bounds how long try, interrupted, waits for the daemon to
// destroy the sandboxes it made.
const tryGoneWait = 12 * time.Second

// Command is `sandboxctl try`.
func Command() *ucli.Command {
	flags := []ucli.Flag{
		&ucli.StringFlag{Name: "check", Usage: "the command that says whether a variant worked (exit 0), run in each sandbox after the variant's"},
		&ucli.StringSliceFlag{Name: "variant", Usage: "a command to try, in a sandbox of its own (repeat it); with --input, the one command every input is given to"},
		&ucli.StringSliceFlag{Name: "input", Usage: "an input for the --variant command, in a sandbox of its own, as $SANDBOX_INPUT (repeat it)"},
		&ucli.StringFlag{Name: "name", Usage: "the sandboxes are named PREFIX-1, PREFIX-2, ... (default try-XXXX, XXXX random)"},
		&ucli.StringFlag{Name: "keep", Value: "winner", Usage: "which sandboxes stay at the end: winner, all or none"},
		&ucli.IntFlag{Name: "parallel", Value: 4, Usage: "most sandboxes made, run and checked at once"},
		&ucli.BoolFlag{Name: "verbose", Usage: "print each sandbox's command and check output"},
		&ucli.StringFlag{Name: "from", Usage: "run each variant in a fork of this sandbox (id or name), with what it set up, rather than in a new sandbox of PROJECT"},
	}
	// create's limits, profile and network, for each sandbox (its --name
	// is the prefix here); exec's environment, user, directory, timeout
	// for each command and check.
	for _, f := range sandboxes.Create().Flags {
		if f.Names()[0] != "name" {
			flags = append(flags, f)
		}
	}
	for _, f := range commands.ExecFlags() {
		if d, ok := f.(*ucli.DurationFlag); ok && d.Name == "timeout" {
			d.Usage = "end each command and each check after this long, like 10m (it fails: timed-out)"
			d.DefaultText = "the daemon's, " + verb.DurationText(sandboxd1.DefaultTryTimeout)
		}
		flags = append(flags, f)
	}
	return &ucli.Command{
		Name:      "try",
		Usage:     "try variants side by side, a sandbox each, with one check; keep the winner",
		ArgsUsage: "[PROJECT] --check CMD --variant CMD... [--input VALUE...] [--from SANDBOX]",
		Description: `Makes a sandbox of PROJECT for each variant, named PREFIX-1, PREFIX-2, ...
in the order given, runs the variant's command in it and then the check,
and prints how each did. Two ways to give the variants:

With --from SANDBOX, each sandbox is a fork of SANDBOX as it stands (its
files, system layer and options: what it installed and built is there in
each), and PROJECT may be left out:
  sandboxctl try --from warm --check 'make test' --variant 'sh fix-a.sh' --variant 'sh fix-b.sh'

A different command in each: --variant once per sandbox.
  sandboxctl try web --check 'make test' --variant 'sh fix-a.sh' --variant 'sh fix-b.sh'

The same command with different inputs: one --variant, and --input once per
sandbox; the command and the check find the input in $SANDBOX_INPUT.
  sandboxctl try web --check 'make test' --variant 'sh fix.sh "$SANDBOX_INPUT"' --input 1.2 --input 1.3

Commands and the check are shell command lines (sh -c), run as you in the
project's directory (--workdir, --env, --root, --timeout as for exec: the
timeout bounds each command and each check). Their output is kept, the last
64 KiB of each; --verbose prints it. A variant passes when its command exits
0 and then the check exits 0; the check of a command that failed is not run.
At most --parallel sandboxes are made, run and checked at once.

The table: RESULT is pass or fail, and what failed how (exit N, signaled,
oom-killed, timed-out); TIME is the command's and the check's time
together; DIFF is how many paths the sandbox changed in its project (as
` + "`sandboxctl diff`" + ` lists them), "-" where the pool cannot tell; DISK is what it
wrote, "-" where the pool does not account it; PEAK is the most memory it
used at once (its command and check, page cache included), "-" where the
kernel does not count it. --json prints the same as an array of objects,
with the output too under --verbose; --quiet prints only the winner's
name.

The winner is the passing variant with the least TIME (the earlier one on
a tie). Promote it with ` + "`sandboxctl promote NAME`" + `.

--keep winner (the default) destroys the other sandboxes at the end, --keep
all keeps them all, --keep none destroys them all. On Ctrl-C or an error,
try stops every command and destroys every sandbox it made (unless --keep
all); it never touches another sandbox. Exit status: 0 when a variant
passed, 1 when none did, 128+N after signal N (130 for Ctrl-C), or the
usual codes.`,
		// A command line may have commas: each --variant is one.
		DisableSliceFlagSeparator: true,
		Flags:                     flags,
		Action:                    tryAction,
	}
}

// trial is one run of try: the daemon's Try does the work (makes, runs,
// checks, destroys); sandboxctl asks and shows.
type trial struct {
	project, check, keep, prefix string
	variants, inputs             []string
	opts                         sbclient.TryOptions
	report                       sandboxd1.TryReport
}

// names are the names of the sandboxes try asks for, in order.
func (t *trial) names() []string {
	names := make([]string, max(len(t.variants), len(t.inputs)))
	for i := range names {
		names[i] = fmt.Sprintf("%s-%d", t.prefix, i+1)
	}
	return names
}

func tryAction(ctx context.Context, cmd *ucli.Command) error {
	t, err := newTrial(cmd)
	if err != nil {
		return err
	}
	c, err := verb.Connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	if from := cmd.String("from"); from != "" {
		e, err := c.Resolve(ctx, from)
		if err != nil {
			return err
		}
		if t.project != "" && t.project != e.Project {
			return verb.Usage("--from %s is a sandbox of %s, not of %s: give its project or none", from, e.Project, t.project)
		}
		t.project, t.opts.From = e.Project, e.ID
	}
	// The sandboxes there before: not try's, whatever their names.
	before, err := c.List(ctx)
	if err != nil {
		return err
	}

	// Ctrl-C, SIGTERM and SIGHUP end the call (and with it the call's
	// own connection, which the Go client's Try makes): the daemon sees
	// its caller gone, stops the work and destroys what it made. Caught
	// before the call, so none is lost.
	interrupts := make(chan os.Signal, 4)
	signal.Notify(interrupts, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(interrupts)
	// No timeout: the call lasts as long as the slowest sandbox.
	tryCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	type reply struct {
		report *sandboxd1.TryReport
		err    error
	}
	replied := make(chan reply, 1)
	go func() {
		report, err := c.API.Try(tryCtx, t.project, t.variants, t.check, t.keep, t.opts)
		replied <- reply{report, err}
	}()
	select {
	case caught := <-interrupts:
		// Ending the call: Try closes its connection as it returns.
		end := func() { cancel(); <-replied }
		what := t.stop(ctx, c, end, before)
		fmt.Fprintf(cmd.Root().ErrWriter, "sandboxctl: interrupted; %s\n", what)
		if s, ok := caught.(syscall.Signal); ok {
			return verb.ExitWith(128 + int(s))
		}
		return verb.ExitWith(130)
	case r := <-replied:
		if r.err != nil {
			return verb.FromBus("trying variants of "+t.project, r.err)
		}
		t.report = *r.report
	}
	if err := t.print(verb.OutputOf(cmd), cmd.Bool("verbose")); err != nil {
		return err
	}
	if left := t.report.Left; len(left) > 0 {
		fmt.Fprintf(cmd.Root().ErrWriter, "sandboxctl: could not destroy %s: destroy them with `sandboxctl destroy %s`\n",
			strings.Join(left, ", "), strings.Join(left, " "))
	}
	if t.report.Winner < 0 {
		return &verb.Error{Code: verb.ExitFailed, Msg: "no variant passed the check", Fix: "--verbose shows each command's and check's output"}
	}
	return nil
}

// stop ends the call (end) after an interruption, then waits (on c)
// until the daemon destroyed the sandboxes try made (unless --keep all),
// and says what became of them.
func (t *trial) stop(ctx context.Context, c *verb.Client, end func(), before []sandboxd1.ListEntry) string {
	ctx = context.WithoutCancel(ctx)
	old := map[string]bool{}
	for _, e := range before {
		old[e.ID] = true
	}
	mine := map[string]bool{}
	for _, n := range t.names() {
		mine[n] = true
	}
	// Made: those of its names there now that were not before (the call
	// still runs, so none is destroyed yet).
	made := map[string]string{} // id: name
	list, _ := c.List(ctx)
	for _, e := range list {
		if mine[e.Name] && !old[e.ID] && e.Project == t.project {
			made[e.ID] = e.Name
		}
	}
	end()
	names := slices.Sorted(maps.Values(made))
	switch {
	case len(made) == 0:
		return "no sandbox was made"
	case t.keep == sandboxd1.KeepAll:
		return "kept (--keep all) " + strings.Join(names, ", ")
	}
	var left []string
	for deadline := time.Now().Add(tryGoneWait); ; time.Sleep(200 * time.Millisecond) {
		list, err := c.List(ctx)
		left = left[:0]
		for _, e := range list {
			if _, ok := made[e.ID]; ok {
				left = append(left, e.Name)
			}
		}
		if err == nil && len(left) == 0 || time.Now().After(deadline) {
			break
		}
	}
	if len(left) > 0 {
		slices.Sort(left)
		return fmt.Sprintf("could not destroy %s: destroy them with `sandboxctl destroy %s`",
			strings.Join(left, ", "), strings.Join(left, " "))
	}
	return "destroyed the sandboxes try made: " + strings.Join(names, ", ")
}

// newTrial reads try's arguments and flags.
func newTrial(cmd *ucli.Command) (*trial, error) {
	a := cmd.Args().Slice()
	if len(a) > 1 || len(a) == 0 && cmd.String("from") == "" {
		return nil, verb.Usage("try takes one PROJECT (or --from SANDBOX), and each variant's command as --variant 'CMD' (usage: %s)", verb.UsageLine(cmd))
	}
	t := &trial{check: cmd.String("check"), prefix: cmd.String("name"), keep: cmd.String("keep")}
	if strings.TrimSpace(t.check) == "" {
		return nil, verb.Usage("try needs --check 'CMD', the command that tells whether a variant worked (usage: %s)", verb.UsageLine(cmd))
	}
	if len(a) == 1 {
		t.project = a[0]
	}
	t.variants, t.inputs = cmd.StringSlice("variant"), cmd.StringSlice("input")
	switch {
	case len(t.variants) == 0:
		return nil, verb.Usage("try needs a --variant 'CMD' for each sandbox, or one --variant with an --input for each (usage: %s)", verb.UsageLine(cmd))
	case len(t.inputs) > 0 && len(t.variants) != 1:
		return nil, verb.Usage("--input gives one command different inputs: give one --variant with it, not %d", len(t.variants))
	}
	for _, v := range t.variants {
		if strings.TrimSpace(v) == "" {
			return nil, verb.Usage("a --variant is empty: give each a command")
		}
	}
	if t.keep != sandboxd1.KeepWinner && t.keep != sandboxd1.KeepAll && t.keep != sandboxd1.KeepNone {
		return nil, verb.Usage("--keep %s: want winner, all or none", t.keep)
	}
	parallel := cmd.Int("parallel")
	if parallel < 1 {
		return nil, verb.Usage("--parallel %d: want 1 or more", parallel)
	}
	if t.prefix == "" {
		t.prefix = "try-" + randid.Hex(2)
	}
	create, err := sandboxes.CreateOptions(cmd)
	if err != nil {
		return nil, err
	}
	exec, err := commands.ExecOptions(cmd)
	if err != nil {
		return nil, err
	}
	create.Name = t.prefix
	if exec.Timeout == 0 {
		exec.Timeout = -1 // none, as exec (not the daemon's default)
	}
	t.opts = sbclient.TryOptions{Create: create, Env: exec.Env, Dir: exec.Dir, Root: exec.Root, Detach: exec.Detach,
		Timeout: exec.Timeout, Inputs: t.inputs, Parallel: uint32(min(parallel, 1024))}
	return t, nil
}
