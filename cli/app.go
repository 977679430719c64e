package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	ucli "github.com/urfave/cli/v3"

	"github.com/sandboxd/sandboxd/sandboxd1"
)

// Run runs sandboxctl with args (os.Args) and returns its exit status.
func Run(ctx context.Context, version string, args []string, stdout, stderr io.Writer) int {
	// A stdout closed at start (`>&-`) is /dev/null by now: Go's runtime
	// opens it in the place of a closed fd 0, 1 or 2, so the output is
	// dropped rather than written to whatever is opened next.
	root := New(version, stdout, stderr)
	err := root.Run(ctx, args)
	if err == nil {
		return ExitOK
	}
	var e *Error
	if !errors.As(err, &e) {
		e = &Error{Code: ExitFailed, Msg: err.Error()}
	}
	var exit exitWith
	if errors.As(err, &exit) {
		return int(exit) // the command's own status; it said what it had to
	}
	fmt.Fprintf(stderr, "sandboxctl: %s\n", e.Error())
	return e.Code
}

// exitWith ends sandboxctl with a command's own status, saying nothing.
type exitWith int

func (e exitWith) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// New is sandboxctl's command tree: what --help, completion and the man
// page read.
func New(version string, stdout, stderr io.Writer) *ucli.Command {
	root := &ucli.Command{
		Name:    "sandboxctl",
		Usage:   "control sandboxd's sandboxes: copies of a project to try things in",
		Version: version,
		Description: `sandboxctl talks to sandboxd over the system bus (org.sandboxd1). A
sandbox is a copy-on-write snapshot of a project, seen inside an overlay
of this host's own root, running with limits; try anything in it, keep
what worked.

Wherever a sandbox is named, its id, its name, or the start of its id
that no other sandbox's id has will do.

` + exitCodes,
		EnableShellCompletion: true,
		Suggest:               true,
		Writer:                stdout,
		ErrWriter:             stderr,
		Flags: []ucli.Flag{
			&ucli.BoolFlag{Name: "json", Usage: "print JSON for scripts and agents, not tables"},
			&ucli.BoolFlag{Name: "quiet", Aliases: []string{"q"}, Usage: "print only what a script needs (ids), or nothing"},
		},
		// Errors are reported once, by Run, with their exit code.
		ExitErrHandler: func(context.Context, *ucli.Command, error) {},
		Action:         rootAction,
		OnUsageError: func(_ context.Context, cmd *ucli.Command, err error, _ bool) error {
			return usage("%v (usage: %s)", err, usageLine(cmd))
		},
		Commands: []*ucli.Command{
			createCommand(), listCommand(), statusCommand(), execCommand(), shellCommand(),
			checkpointCommand(), checkpointsCommand(), rollbackCommand(), diffCommand(), tryCommand(),
			promoteCommand(), promotionsCommand(), approveCommand(), rejectCommand(), rebaseCommand(),
			freezeCommand(), thawCommand(), destroyCommand(), gcCommand(), projectCommand(), manCommand(),
			portCommand(), limitsCommand(),
			runCommand(), psCommand(), logsCommand(), killCommand(), replCommand(),
			cacheCommand(), catCommand(), cpCommand(),
			mcpCommand(),
		},
	}
	root.DisableSliceFlagSeparator = true
	for _, c := range root.Commands {
		setUsageError(c)
	}
	return root
}

// setUsageError also keeps list flags' values whole: urfave splits them
// at commas by default, which would cut --env 'A=x,y' or an allowlist
// entry in two.
func setUsageError(c *ucli.Command) {
	c.DisableSliceFlagSeparator = true
	c.OnUsageError = func(_ context.Context, cmd *ucli.Command, err error, _ bool) error {
		return usage("%v (usage: %s)", err, usageLine(cmd))
	}
	for _, sub := range c.Commands {
		setUsageError(sub)
	}
}

// usageLine is how cmd is called: "sandboxctl exec [options] SANDBOX -- COMMAND...".
func usageLine(cmd *ucli.Command) string {
	line := cmd.FullName()
	if !strings.HasPrefix(line, "sandboxctl") {
		line = "sandboxctl " + line
	}
	if len(cmd.VisibleFlags()) > 0 {
		line += " [options]"
	}
	if cmd.ArgsUsage != "" {
		line += " " + cmd.ArgsUsage
	}
	return line
}

// args checks that cmd got between min and max positional arguments
// (max < 0: any number).
func args(cmd *ucli.Command, min, max int) ([]string, error) {
	a := cmd.Args().Slice()
	if len(a) < min || (max >= 0 && len(a) > max) {
		return nil, usage("%s takes %s (usage: %s)", cmd.Name, cmd.ArgsUsage, usageLine(cmd))
	}
	return a, nil
}

// output is how a verb prints: a table, JSON, or only ids.
type output struct {
	w     io.Writer
	json  bool
	quiet bool
}

func outputOf(cmd *ucli.Command) output {
	return output{w: cmd.Root().Writer, json: cmd.Bool("json"), quiet: cmd.Bool("quiet")}
}

// JSON prints v as indented JSON.
func (o output) JSON(v any) error {
	enc := json.NewEncoder(o.w)
	enc.SetIndent("", "  ")
	return written(enc.Encode(v))
}

// table prints rows under a header, aligned.
func (o output) table(header []string, rows [][]string) error {
	tw := tabwriter.NewWriter(o.w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	return written(tw.Flush())
}

func (o output) line(format string, a ...any) error {
	_, err := fmt.Fprintf(o.w, format+"\n", a...)
	return written(err)
}

// written reports a failed write of the output (a closed stdout).
func written(err error) error {
	if err != nil {
		return &Error{Code: ExitFailed, Msg: "writing the output: " + err.Error(), Err: err}
	}
	return nil
}

// withClient runs fn with a connection to the daemon.
func withClient(ctx context.Context, fn func(*client) error) error {
	c, err := connect(ctx)
	if err != nil {
		return err
	}
	defer c.close()
	return fn(c)
}

// rootAction answers `sandboxctl` alone with help, and an unknown verb
// with the nearest known one.
func rootAction(ctx context.Context, cmd *ucli.Command) error {
	if cmd.Args().Len() == 0 {
		return ucli.ShowRootCommandHelp(cmd)
	}
	verb := cmd.Args().First()
	best, dist := "", 3
	for _, c := range cmd.VisibleCommands() {
		if d := editDistance(verb, c.Name); d < dist {
			best, dist = c.Name, d
		}
	}
	if best != "" {
		return usage("%q is not a sandboxctl command; did you mean %q? (see `sandboxctl --help`)", verb, best)
	}
	return usage("%q is not a sandboxctl command (see `sandboxctl --help`)", verb)
}

// editDistance is Levenshtein's distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

// onSandbox is the Action of a verb about one sandbox: it takes nargs
// arguments, the first naming the sandbox, connects, finds the sandbox,
// and runs fn with it and the other arguments.
func onSandbox(nargs int, fn func(ctx context.Context, cmd *ucli.Command, c *client, e sandboxd1.ListEntry, rest []string) error) ucli.ActionFunc {
	return func(ctx context.Context, cmd *ucli.Command) error {
		a, err := args(cmd, nargs, nargs)
		if err != nil {
			return err
		}
		return withClient(ctx, func(c *client) error {
			e, err := c.resolve(ctx, a[0])
			if err != nil {
				return err
			}
			return fn(ctx, cmd, c, e, a[1:])
		})
	}
}

// onSandboxes is the Action of a verb about all the sandboxes the caller
// may see: it takes no arguments, connects and lists them for fn.
func onSandboxes(fn func(ctx context.Context, cmd *ucli.Command, c *client, entries []sandboxd1.ListEntry) error) ucli.ActionFunc {
	return func(ctx context.Context, cmd *ucli.Command) error {
		if _, err := args(cmd, 0, 0); err != nil {
			return err
		}
		return withClient(ctx, func(c *client) error {
			entries, err := c.list(ctx)
			if err != nil {
				return err
			}
			return fn(ctx, cmd, c, entries)
		})
	}
}

// printList prints items as JSON, as a name a line (--quiet), or as a
// table under header.
func printList[T any](out output, items []T, name func(T) string, header []string, row func(T) []string) error {
	if out.json {
		if items == nil {
			items = []T{}
		}
		return out.JSON(items)
	}
	if out.quiet {
		for _, it := range items {
			if err := out.line("%s", name(it)); err != nil {
				return err
			}
		}
		return nil
	}
	rows := [][]string{}
	for _, it := range items {
		rows = append(rows, row(it))
	}
	return out.table(header, rows)
}
