package cli

import (
	"context"
	"errors"
	"fmt"
	"io"

	ucli "github.com/urfave/cli/v3"

	"github.com/sandboxd/sandboxd/cli/checkpoints"
	"github.com/sandboxd/sandboxd/cli/commands"
	"github.com/sandboxd/sandboxd/cli/projects"
	"github.com/sandboxd/sandboxd/cli/promotion"
	"github.com/sandboxd/sandboxd/cli/sandboxes"
	"github.com/sandboxd/sandboxd/cli/try"
	"github.com/sandboxd/sandboxd/cli/verb"
)

// Run runs sandboxctl with args (os.Args) and returns its exit status.
func Run(ctx context.Context, version string, args []string, stdout, stderr io.Writer) int {
	// A stdout closed at start (`>&-`) is /dev/null by now: Go's runtime
	// opens it in the place of a closed fd 0, 1 or 2, so the output is
	// dropped rather than written to whatever is opened next.
	root := New(version, stdout, stderr)
	err := root.Run(ctx, args)
	if err == nil {
		return verb.ExitOK
	}
	var e *verb.Error
	if !errors.As(err, &e) {
		e = &verb.Error{Code: verb.ExitFailed, Msg: err.Error()}
	}
	var exit verb.ExitWith
	if errors.As(err, &exit) {
		return int(exit) // the command's own status; it said what it had to
	}
	fmt.Fprintf(stderr, "sandboxctl: %s\n", e.Error())
	return e.Code
}

// New is sandboxctl's command tree: what --help, completion and the man
// page read.
func New(version string, stdout, stderr io.Writer) *ucli.Command {
	verb.ShowFlagsTruly()
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

` + verb.ExitCodes,
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
			return verb.Usage("%v (usage: %s)", err, verb.UsageLine(cmd))
		},
		// In the order help and the man page list them.
		Commands: []*ucli.Command{
			sandboxes.Create(), sandboxes.List(), sandboxes.Status(), commands.Exec(), commands.Shell(),
			checkpoints.Checkpoint(), checkpoints.Checkpoints(), checkpoints.Rollback(), checkpoints.Diff(), try.Command(),
			promotion.Promote(), promotion.Promotions(), promotion.Approve(), promotion.Reject(), checkpoints.Rebase(), checkpoints.Versions(), checkpoints.Merge(),
			sandboxes.Fork(), sandboxes.Freeze(), sandboxes.Thaw(), sandboxes.Stop(), sandboxes.Start(), sandboxes.Destroy(), sandboxes.GC(), projects.Command(), manCommand(),
			sandboxes.Port(), sandboxes.Limits(), sandboxes.Pools(),
			commands.Run(), commands.Spawn(), commands.PS(), commands.Logs(), commands.Kill(), commands.Repl(),
			sandboxes.Cache(), commands.Cat(), commands.Cp(),
			mcpCommand(), helpCommand(),
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
		return verb.Usage("%v (usage: %s)", err, verb.UsageLine(cmd))
	}
	for _, sub := range c.Commands {
		setUsageError(sub)
	}
}

// helpCommand is `sandboxctl help [COMMAND [SUBCOMMAND...]]`: urfave's
// own help of the command the words name, at any depth. (urfave's built-in
// help command reads only the first word: `help project add` showed
// project's help, not add's.)
func helpCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "help",
		Aliases:   []string{"h"},
		Usage:     "show the commands, or one command's help",
		ArgsUsage: "[COMMAND [SUBCOMMAND...]]",
		HideHelp:  true,
		Action: func(ctx context.Context, cmd *ucli.Command) error {
			var parent *ucli.Command
			c := cmd.Root()
			for _, word := range cmd.Args().Slice() {
				sub := c.Command(word)
				if sub == nil {
					return verb.Usage("%q is not a command of %s (see `%s --help`)", word, c.FullName(), c.FullName())
				}
				parent, c = c, sub
			}
			if parent == nil {
				return ucli.ShowRootCommandHelp(c)
			}
			return ucli.ShowCommandHelp(ctx, parent, c.Name)
		},
	}
}

// rootAction answers `sandboxctl` alone with help, and an unknown verb
// with the nearest known one.
func rootAction(ctx context.Context, cmd *ucli.Command) error {
	if cmd.Args().Len() == 0 {
		return ucli.ShowRootCommandHelp(cmd)
	}
	name := cmd.Args().First()
	best, dist := "", 3
	for _, c := range cmd.VisibleCommands() {
		if d := editDistance(name, c.Name); d < dist {
			best, dist = c.Name, d
		}
	}
	if best != "" {
		return verb.Usage("%q is not a sandboxctl command; did you mean %q? (see `sandboxctl --help`)", name, best)
	}
	return verb.Usage("%q is not a sandboxctl command (see `sandboxctl --help`)", name)
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
