package sandboxes

import (
	"context"
	"fmt"
	"strings"

	"github.com/godbus/dbus/v5"
	ucli "github.com/urfave/cli/v3"

	"github.com/sandboxd/sandboxd/cli/verb"
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
			// The daemon checks the count, and says so.
			opts := map[string]dbus.Variant{sandboxd1.OptCount: dbus.MakeVariant(uint32(min(cmd.Uint("count"), 1<<20)))}
			if names := cmd.StringSlice("name"); len(names) > 0 {
				opts[sandboxd1.OptNames] = dbus.MakeVariant(names)
			}
			if lines := cmd.StringSlice("spawn"); len(lines) > 0 {
				var argvs [][]string
				for _, l := range lines {
					argvs = append(argvs, []string{"/bin/sh", "-c", l})
				}
				opts[sandboxd1.OptSpawn] = dbus.MakeVariant(argvs)
			}
			var ids, notCarried []string
			if err := verb.Call(ctx, c.Sandbox(e.ID), "forking sandbox "+e.ID, sandboxd1.SandboxInterface+"."+sandboxd1.MethodFork,
				[]any{opts}, &ids, &notCarried); err != nil {
				return err
			}
			out := verb.OutputOf(cmd)
			if out.AsJSON {
				return out.JSON(map[string]any{"sandbox": e.ID, "forks": ids, "not_carried": append([]string{}, notCarried...)})
			}
			for _, id := range ids {
				if err := out.Line("%s", id); err != nil {
					return err
				}
			}
			if len(notCarried) > 0 && !out.Quiet {
				fmt.Fprintf(cmd.Root().ErrWriter, "not carried (background processes of %s; start them with --spawn or sandboxctl spawn): %s\n",
					e.ID, strings.Join(notCarried, "; "))
			}
			return nil
		}),
	}
}
