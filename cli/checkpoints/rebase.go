package checkpoints

import (
	"context"

	ucli "github.com/urfave/cli/v3"

	"github.com/sandboxd/sandboxd/cli/verb"
	"github.com/sandboxd/sandboxd/sandboxd1"
)

// Rebase is `sandboxctl rebase`.
func Rebase() *ucli.Command {
	return &ucli.Command{
		Name:      "rebase",
		Usage:     "bring a sandbox onto its project as it is now, keeping the sandbox's changes",
		ArgsUsage: "SANDBOX",
		Description: `Takes a new base of the project and applies the sandbox's own changes
onto a copy of it, unless the project changed any of the same paths (a
conflict: refused, naming each; exit 5). Like a rollback, the sandbox's
processes are stopped and it starts again, on the new copy; its system
layer and checkpoints stay.`,
		Action: verb.OnSandbox(1, func(ctx context.Context, cmd *ucli.Command, c *verb.Client, e sandboxd1.ListEntry, _ []string) error {
			sb := c.Handle(e)
			moved, _, err := sb.ProjectChanges(ctx)
			if err != nil {
				return verb.FromBus("reading how the project of sandbox "+e.ID+" moved", err)
			}
			if err := sb.Rebase(ctx); err != nil {
				return verb.FromBus("rebasing sandbox "+verb.SandboxLabel(e), err)
			}
			out := verb.OutputOf(cmd)
			switch {
			case out.AsJSON:
				return out.JSON(map[string]any{"sandbox": e.ID, "project_changes": len(moved)})
			case out.Quiet:
				return nil
			}
			return out.Line("sandbox %s is on project %s as it is now (%s the project changed since the old base); its processes were stopped, it runs again",
				verb.SandboxLabel(e), e.Project, verb.Plural(len(moved), "path"))
		}),
	}
}
