package sandboxes

import (
	"context"
	"fmt"
	"strings"

	ucli "github.com/urfave/cli/v3"

	"github.com/sandboxd/sandboxd/cli/verb"
	sbclient "github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/sandboxd1"
)

// Fork is `sandboxctl fork`.
func Fork() *ucli.Command {
	return &ucli.Command{
		Name:      "fork",
		Usage:     "make sandboxes of a sandbox as it stands: its files, its system layer, its options",
		ArgsUsage: "SANDBOX",
		Description: `Makes --count new sandboxes (1 to 16) whose copy of the project and system
layer (what it installed in /usr, /etc, ...) are SANDBOX's as they stand,
taken at one instant (it is frozen for it), each with its options, limits,
network, owner, environment and base, and a quota and id block of its own.
A fork of a booted sandbox boots. Checkpoints, exposed ports and running
background processes are not carried: the ones running are named, and
--spawn starts a command line in the background in each fork. Prints the
new ids, one a line.`,
		Flags: []ucli.Flag{
			&ucli.UintFlag{Name: "count", Aliases: []string{"n"}, Value: 1, Usage: "how many forks to make (1 to 16)"},
			&ucli.StringSliceFlag{Name: "name", Usage: "a name for a fork, in order (repeat it; at most --count)"},
			&ucli.StringSliceFlag{Name: "spawn", Usage: "a command line to start in the background in each fork, as sh -c runs it (repeat it)"},
		},
		Action: verb.OnSandbox(1, func(ctx context.Context, cmd *ucli.Command, c *verb.Client, e sandboxd1.ListEntry, _ []string) error {
			// The daemon checks the count, and says so; but the client takes
			// 0 for its default, one fork, where --count 0 is a mistake.
			count := cmd.Uint("count")
			if count == 0 {
				return verb.Usage("forking sandbox %s: --count 0: make 1 to %d forks at once", e.ID, sandboxd1.MaxForks)
			}
			var spawn [][]string
			for _, l := range cmd.StringSlice("spawn") {
				spawn = append(spawn, []string{"/bin/sh", "-c", l})
			}
			res, err := c.Handle(e).Fork(ctx, sbclient.ForkOptions{Count: int(min(count, 1<<20)), Names: cmd.StringSlice("name"), Spawn: spawn})
			if err != nil {
				return verb.FromBus("forking sandbox "+e.ID, err)
			}
			out := verb.OutputOf(cmd)
			if out.AsJSON {
				return out.JSON(map[string]any{"sandbox": e.ID, "forks": res.IDs, "not_carried": append([]string{}, res.NotCarried...)})
			}
			for _, id := range res.IDs {
				if err := out.Line("%s", id); err != nil {
					return err
				}
			}
			if len(res.NotCarried) > 0 && !out.Quiet {
				fmt.Fprintf(cmd.Root().ErrWriter, "not carried (background processes of %s; start them with --spawn or sandboxctl spawn): %s\n",
					e.ID, strings.Join(res.NotCarried, "; "))
			}
			return nil
		}),
	}
}
