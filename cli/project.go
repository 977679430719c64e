package cli

import (
	"context"

	ucli "github.com/urfave/cli/v3"

	"github.com/sandboxd/sandboxd/supervisor/api"
)

func projectCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "project",
		Usage: "the projects sandboxes are made from",
		Commands: []*ucli.Command{
			{
				Name:      "add",
				Usage:     "register a btrfs subvolume or a ZFS dataset as a project (administrators)",
				ArgsUsage: "NAME LOCATION",
				Action: func(ctx context.Context, cmd *ucli.Command) error {
					a, err := args(cmd, 2, 2)
					if err != nil {
						return err
					}
					return withClient(ctx, func(c *client) error {
						if err := call(ctx, c.manager(), "adding project "+a[0], api.ManagerInterface+".AddProject", []any{a[0], a[1]}); err != nil {
							return err
						}
						out := outputOf(cmd)
						switch {
						case out.json:
							return out.JSON(api.ProjectEntry{Name: a[0], Location: a[1], Origin: "added"})
						case out.quiet:
							return nil
						}
						return out.line("added project %s at %s", a[0], a[1])
					})
				},
			},
			{
				Name:  "list",
				Usage: "list the projects",
				Action: func(ctx context.Context, cmd *ucli.Command) error {
					if _, err := args(cmd, 0, 0); err != nil {
						return err
					}
					return withClient(ctx, func(c *client) error {
						var list []api.ProjectEntry
						if err := call(ctx, c.manager(), "listing projects", api.ManagerInterface+".ListProjects", nil, &list); err != nil {
							return err
						}
						return printList(outputOf(cmd), list, func(p api.ProjectEntry) string { return p.Name },
							[]string{"NAME", "LOCATION", "FROM"}, func(p api.ProjectEntry) []string {
								origin := "sandboxd.toml"
								if p.Origin != "config" {
									origin = "sandboxctl project add"
								}
								return []string{p.Name, p.Location, origin}
							})
					})
				},
			},
			{
				Name:      "remove",
				Usage:     "forget a project added with `project add` (its files stay) (administrators)",
				ArgsUsage: "NAME",
				Action: func(ctx context.Context, cmd *ucli.Command) error {
					a, err := args(cmd, 1, 1)
					if err != nil {
						return err
					}
					return withClient(ctx, func(c *client) error {
						if err := call(ctx, c.manager(), "removing project "+a[0], api.ManagerInterface+".RemoveProject", []any{a[0]}); err != nil {
							return err
						}
						out := outputOf(cmd)
						switch {
						case out.json:
							return out.JSON(map[string]string{"removed": a[0]})
						case out.quiet:
							return nil
						}
						return out.line("removed project %s (its files are untouched)", a[0])
					})
				},
			},
		},
	}
}
