package cli

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/godbus/dbus/v5"
	ucli "github.com/urfave/cli/v3"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/sandboxd1"
)

// Bounds of try: what it keeps of each command's output, and how long a
// call it must not abandon (a create, a destroy) may take.
const (
	tryOutputMax   = 64 << 10
	tryCallTimeout = 5 * time.Minute
)

func tryCommand() *ucli.Command {
	flags := []ucli.Flag{
		&ucli.StringFlag{Name: "check", Usage: "the command that says whether a variant worked (exit 0), run in each sandbox after the variant's"},
		&ucli.StringSliceFlag{Name: "variant", Usage: "a command to try, in a sandbox of its own (repeat it); with --input, the one command every input is given to"},
		&ucli.StringSliceFlag{Name: "input", Usage: "an input for the --variant command, in a sandbox of its own, as $SANDBOX_INPUT (repeat it)"},
		&ucli.StringFlag{Name: "name", Usage: "the sandboxes are named PREFIX-1, PREFIX-2, ... (default try-XXXX, XXXX random)"},
		&ucli.StringFlag{Name: "keep", Value: "winner", Usage: "which sandboxes stay at the end: winner, all or none"},
		&ucli.IntFlag{Name: "parallel", Value: 4, Usage: "most sandboxes made, run and checked at once"},
		&ucli.BoolFlag{Name: "verbose", Usage: "print each sandbox's command and check output"},
	}
	// create's limits, profile and network, for each sandbox (its --name
	// is the prefix here); exec's environment, user, directory, timeout
	// for each command and check.
	for _, f := range createCommand().Flags {
		if f.Names()[0] != "name" {
			flags = append(flags, f)
		}
	}
	for _, f := range execFlags() {
		if d, ok := f.(*ucli.DurationFlag); ok && d.Name == "timeout" {
			d.Usage = "end each command and each check after this long, like 10m (it fails: timed-out)"
		}
		flags = append(flags, f)
	}
	return &ucli.Command{
		Name:      "try",
		Usage:     "try variants side by side, a sandbox each, with one check; keep the winner",
		ArgsUsage: "PROJECT --check CMD --variant CMD... [--input VALUE...]",
		Description: `Makes a sandbox of PROJECT for each variant, named PREFIX-1, PREFIX-2, ...
in the order given, runs the variant's command in it and then the check,
and prints how each did. Two ways to give the variants:

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

// tryVariant is one sandbox's work: a command and, with --input, its input.
type tryVariant struct {
	command string
	input   *string
}

// tryResult is how one sandbox did: a row of the table, an object of the
// JSON.
type tryResult struct {
	Name    string  `json:"name"`
	ID      string  `json:"id"`
	Command string  `json:"command"`
	Input   *string `json:"input,omitempty"`
	Passed  bool    `json:"passed"`
	// Result is the table's RESULT: pass, or fail and what failed how.
	Result string `json:"result"`
	// FailedIn is "command" or "check"; How, Status and Signal are that
	// step's end, as CommandExited tells it.
	FailedIn string  `json:"failed_in,omitempty"`
	How      string  `json:"how,omitempty"`
	Status   int32   `json:"status,omitempty"`
	Signal   int32   `json:"signal,omitempty"`
	Seconds  float64 `json:"seconds"` // the command's and the check's
	// CommandSeconds and CheckSeconds are each step's part of Seconds.
	CommandSeconds float64 `json:"command_seconds"`
	CheckSeconds   float64 `json:"check_seconds"`
	// Changed is the number of paths Diff lists; nil where the pool
	// cannot tell.
	Changed *int `json:"changed"`
	// DiskUsed is Usage's DiskUsed, bytes; nil where it is not accounted.
	DiskUsed *uint64 `json:"disk_used"`
	// MemoryPeak is Usage's MemoryPeak, bytes, read once the check
	// ended; nil where it is not counted.
	MemoryPeak    *uint64 `json:"memory_peak"`
	Winner        bool    `json:"winner"`
	Kept          bool    `json:"kept"`
	CommandOutput *string `json:"command_output,omitempty"` // with --verbose
	CheckOutput   *string `json:"check_output,omitempty"`   // with --verbose, when the check ran

	time                 time.Duration
	commandOut, checkOut *string
}

// trial is one run of try.
type trial struct {
	project, check string
	variants       []tryVariant
	prefix         string
	create         map[string]dbus.Variant // CreateSandbox's options but Name
	exec           map[string]dbus.Variant // Exec's options but the input
	parallel       int
	results        []tryResult
}

func tryAction(ctx context.Context, cmd *ucli.Command) error {
	t, err := newTrial(cmd)
	if err != nil {
		return err
	}
	keep := cmd.String("keep")
	out := outputOf(cmd)

	// Ctrl-C, SIGTERM and SIGHUP stop the work and leave the clean-up to
	// finish: caught before the first create, so none is lost.
	interrupts := make(chan os.Signal, 4)
	signal.Notify(interrupts, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(interrupts)
	work, cancel := context.WithCancel(ctx)
	defer cancel()
	var caught os.Signal
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		select {
		case caught = <-interrupts:
			cancel()
		case <-work.Done():
		}
	}()

	err = t.run(work, cancel)
	cancel()
	<-stopped // caught is set, or will never be

	if caught != nil || err != nil {
		// Nothing is decided: every sandbox made goes, unless all stay.
		kept := keep == "all"
		gone, left := t.cleanUp(ctx, func(r tryResult) bool { return !kept })
		what := t.cleanUpText(gone, left, kept)
		if caught != nil {
			fmt.Fprintf(cmd.Root().ErrWriter, "sandboxctl: interrupted; %s\n", what)
			if s, ok := caught.(syscall.Signal); ok {
				return exitWith(128 + int(s))
			}
			return exitWith(130)
		}
		var e *Error
		if !errors.As(err, &e) {
			e = &Error{Code: ExitFailed, Msg: err.Error(), Err: err}
		}
		if len(t.made()) == 0 {
			return e
		}
		return &Error{Code: e.Code, Msg: e.Msg + "; " + what, Fix: e.Fix, Err: e}
	}

	winner := -1
	for i, r := range t.results {
		if r.Passed && (winner < 0 || r.time < t.results[winner].time) {
			winner = i
		}
	}
	if winner >= 0 {
		t.results[winner].Winner = true
	}
	gone, left := t.cleanUp(ctx, func(r tryResult) bool {
		return keep == "none" || keep == "winner" && !r.Winner
	})
	if err := t.print(out, cmd.Bool("verbose"), winner); err != nil {
		return err
	}
	if len(left) > 0 {
		fmt.Fprintf(cmd.Root().ErrWriter, "sandboxctl: %s\n", t.cleanUpText(gone, left, false))
	}
	if winner < 0 {
		return &Error{Code: ExitFailed, Msg: "no variant passed the check", Fix: "--verbose shows each command's and check's output"}
	}
	return nil
}

// newTrial reads try's arguments and flags.
func newTrial(cmd *ucli.Command) (*trial, error) {
	a := cmd.Args().Slice()
	if len(a) != 1 {
		return nil, usage("try takes one PROJECT, and each variant's command as --variant 'CMD' (usage: %s)", usageLine(cmd))
	}
	t := &trial{project: a[0], check: cmd.String("check"), prefix: cmd.String("name"), parallel: int(cmd.Int("parallel"))}
	if strings.TrimSpace(t.check) == "" {
		return nil, usage("try needs --check 'CMD', the command that tells whether a variant worked (usage: %s)", usageLine(cmd))
	}
	variants, inputs := cmd.StringSlice("variant"), cmd.StringSlice("input")
	switch {
	case len(variants) == 0:
		return nil, usage("try needs a --variant 'CMD' for each sandbox, or one --variant with an --input for each (usage: %s)", usageLine(cmd))
	case len(inputs) > 0 && len(variants) != 1:
		return nil, usage("--input gives one command different inputs: give one --variant with it, not %d", len(variants))
	case len(inputs) > 0:
		for _, in := range inputs {
			t.variants = append(t.variants, tryVariant{command: variants[0], input: &in})
		}
	default:
		for _, v := range variants {
			t.variants = append(t.variants, tryVariant{command: v})
		}
	}
	for _, v := range t.variants {
		if strings.TrimSpace(v.command) == "" {
			return nil, usage("a --variant is empty: give each a command")
		}
	}
	if k := cmd.String("keep"); k != "winner" && k != "all" && k != "none" {
		return nil, usage("--keep %s: want winner, all or none", k)
	}
	if t.parallel < 1 {
		return nil, usage("--parallel %d: want 1 or more", t.parallel)
	}
	if t.prefix == "" {
		b := make([]byte, 2)
		_, _ = rand.Read(b)
		t.prefix = "try-" + hex.EncodeToString(b)
	}
	var err error
	if t.create, err = createOptions(cmd); err != nil {
		return nil, err
	}
	delete(t.create, "Name")
	if t.exec, err = execOptions(cmd); err != nil {
		return nil, err
	}
	t.results = make([]tryResult, len(t.variants))
	for i, v := range t.variants {
		t.results[i] = tryResult{Name: fmt.Sprintf("%s-%d", t.prefix, i+1), Command: v.command, Input: v.input}
	}
	return t, nil
}

// run makes, runs and checks every sandbox, at most t.parallel at once,
// each worker on a connection of its own (where its commands' ends come).
// The first error cancels the others' work.
func (t *trial) run(ctx context.Context, cancel context.CancelFunc) error {
	var (
		mu    sync.Mutex
		first error
		wg    sync.WaitGroup
	)
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if first == nil && ctx.Err() == nil {
			first = err
		}
		cancel()
	}
	next := make(chan int, len(t.variants))
	for i := range t.variants {
		next <- i
	}
	close(next)
	stdin, err := os.Open(os.DevNull)
	if err != nil {
		return err
	}
	defer stdin.Close()
	null := dbus.UnixFD(stdin.Fd())
	for range min(t.parallel, len(t.variants)) {
		wg.Go(func() {
			c, err := connect(ctx)
			if err != nil {
				fail(err)
				return
			}
			defer c.close()
			if err := c.watchExits(); err != nil {
				fail(fromBus("watching for the commands' ends", err))
				return
			}
			for i := range next {
				if ctx.Err() != nil {
					return
				}
				if err := t.one(ctx, c, i, null); err != nil {
					fail(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return first
}

// one makes sandbox i, runs its command and the check, and reads what it
// changed and wrote and its memory peak.
func (t *trial) one(ctx context.Context, c *client, i int, stdin dbus.UnixFD) error {
	r := &t.results[i]
	opts := map[string]dbus.Variant{"Name": dbus.MakeVariant(r.Name)}
	for k, v := range t.create {
		opts[k] = v
	}
	// Never abandoned half way: try knows every sandbox it made.
	cctx, done := context.WithTimeout(context.WithoutCancel(ctx), tryCallTimeout)
	var object dbus.ObjectPath
	err := call(cctx, c.manager(), "making sandbox "+r.Name, sandboxd1.ManagerInterface+".CreateSandbox",
		[]any{t.project, opts}, &r.ID, &object)
	done()
	if err != nil {
		return err
	}

	exec := map[string]dbus.Variant{}
	for k, v := range t.exec {
		exec[k] = v
	}
	if r.Input != nil {
		env, _ := exec["Environment"].Value().([]string)
		exec["Environment"] = dbus.MakeVariant(append(slices.Clip(env), "SANDBOX_INPUT="+*r.Input))
	}
	st, cmdOut, took, err := c.capture(ctx, r.ID, r.Command, exec, stdin)
	if err != nil {
		return err
	}
	r.commandOut, r.CommandSeconds, r.time = &cmdOut, took.Seconds(), took
	if st.How != "exited" || st.Status != 0 {
		r.failed("command", st)
	} else {
		checked, checkOut, took, err := c.capture(ctx, r.ID, t.check, exec, stdin)
		if err != nil {
			return err
		}
		r.checkOut, r.CheckSeconds, r.time = &checkOut, took.Seconds(), r.time+took
		if checked.How == "exited" && checked.Status == 0 {
			r.Passed, r.Result = true, "pass"
		} else {
			r.failed("check", checked)
		}
	}
	r.Seconds = r.time.Seconds()

	var changes []sandboxd1.ChangeEntry
	if err := call(ctx, c.sandbox(r.ID), "listing the changes of sandbox "+r.ID, sandboxd1.SandboxInterface+".Diff", nil, &changes); err == nil {
		n := len(changes)
		r.Changed = &n
	} else if ctx.Err() != nil {
		return ctx.Err()
	}
	v, err := c.property(ctx, r.ID, "Usage")
	if err != nil {
		return err
	}
	usage, _ := v.Value().(map[string]dbus.Variant)
	if d, ok := usage["DiskUsed"].Value().(uint64); ok {
		r.DiskUsed = &d
	}
	if p, ok := usage["MemoryPeak"].Value().(uint64); ok {
		r.MemoryPeak = &p
	}
	return nil
}

func (r *tryResult) failed(step string, st exitStatus) {
	r.FailedIn, r.How, r.Status, r.Signal = step, st.How, st.Status, st.Signal
	how := st.How
	switch st.How {
	case "exited":
		how = fmt.Sprintf("exit %d", st.Status)
	case "signaled":
		name := unix.SignalName(syscall.Signal(st.Signal))
		how = "signaled (" + cmp.Or(name, fmt.Sprintf("signal %d", st.Signal)) + ")"
	}
	r.Result = "fail (" + step + ": " + how + ")"
}

// capture runs the shell command line line in sandbox, with a pipe of
// its own for stdout and stderr, and returns how it ended, the last
// tryOutputMax bytes of its output and how long it took. A command still
// running when ctx ends is sent SIGTERM.
func (c *client) capture(ctx context.Context, sandbox, line string, opts map[string]dbus.Variant, stdin dbus.UnixFD) (exitStatus, string, time.Duration, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return exitStatus{}, "", 0, err
	}
	defer r.Close()
	out := &tailBuffer{max: tryOutputMax}
	drained := make(chan struct{})
	go func() { _, _ = io.Copy(out, r); close(drained) }()
	begin := time.Now()
	var id string
	// Not cancelled: a command that runs is one try knows of.
	cctx, done := context.WithTimeout(context.WithoutCancel(ctx), tryCallTimeout)
	err = call(cctx, c.sandbox(sandbox), "running "+quote(line)+" in sandbox "+sandbox, sandboxd1.SandboxInterface+".Exec",
		[]any{[]string{"/bin/sh", "-c", line}, opts, stdin, dbus.UnixFD(w.Fd()), dbus.UnixFD(w.Fd())}, &id)
	done()
	w.Close()
	if err != nil {
		return exitStatus{}, "", 0, err
	}
	st, err := c.waitExit(ctx, id, nil, nil)
	took := time.Since(begin)
	if err != nil {
		if ctx.Err() != nil {
			sctx, done := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			_ = call(sctx, c.sandbox(sandbox), "stopping the command", sandboxd1.SandboxInterface+".Signal", []any{id, int32(syscall.SIGTERM)})
			done()
		}
		return exitStatus{}, "", 0, err
	}
	// What it left running (a daemon it started) may hold the pipe.
	select {
	case <-drained:
	case <-time.After(time.Second):
		r.Close()
		<-drained
	}
	return st, out.String(), took, nil
}

// cleanUp destroys the sandboxes try made that go says go, a few at a
// time, on a connection and a context of its own (the work's may have
// ended), and marks the others kept. It returns the names destroyed and
// those that could not be.
func (t *trial) cleanUp(ctx context.Context, goes func(tryResult) bool) (gone, left []string) {
	var doomed []*tryResult
	for i := range t.results {
		r := &t.results[i]
		switch {
		case r.ID == "":
		case goes(*r):
			doomed = append(doomed, r)
		default:
			r.Kept = true
		}
	}
	if len(doomed) == 0 {
		return nil, nil
	}
	cctx, done := context.WithTimeout(context.WithoutCancel(ctx), tryCallTimeout)
	defer done()
	c, err := connect(cctx)
	if err != nil {
		for _, r := range doomed {
			left = append(left, r.Name)
		}
		return nil, left
	}
	defer c.close()
	ok := make([]bool, len(doomed))
	sem := make(chan struct{}, t.parallel)
	var wg sync.WaitGroup
	for i, r := range doomed {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			ok[i] = call(cctx, c.sandbox(r.ID), "destroying sandbox "+r.Name, sandboxd1.SandboxInterface+".Destroy", nil) == nil
		})
	}
	wg.Wait()
	for i, r := range doomed {
		if ok[i] {
			gone = append(gone, r.Name)
		} else {
			r.Kept = true // it is there still
			left = append(left, r.Name)
		}
	}
	return gone, left
}

// made is the names of the sandboxes try made.
func (t *trial) made() []string {
	var made []string
	for _, r := range t.results {
		if r.ID != "" {
			made = append(made, r.Name)
		}
	}
	return made
}

// cleanUpText says what became of the sandboxes made, after an
// interruption or an error (or, with left, a destroy that failed).
func (t *trial) cleanUpText(gone, left []string, keptAll bool) string {
	made := t.made()
	switch {
	case len(made) == 0:
		return "no sandbox was made"
	case len(left) > 0:
		return fmt.Sprintf("could not destroy %s: destroy them with `sandboxctl destroy %s`",
			strings.Join(left, ", "), strings.Join(left, " "))
	case keptAll:
		return "kept (--keep all) " + strings.Join(made, ", ")
	}
	return "destroyed the sandboxes try made: " + strings.Join(gone, ", ")
}
