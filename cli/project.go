package cli

import (
	"context"

	"github.com/godbus/dbus/v5"
	ucli "github.com/urfave/cli/v3"

	"github.com/sandboxd/sandboxd/sandboxd1"
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
				Flags: []ucli.Flag{
					&ucli.StringSliceFlag{Name: "user", Usage: "a user (name or uid) who may use the project; repeatable (default: the directory's owner)"},
					&ucli.StringSliceFlag{Name: "group", Usage: "a group (name or gid) whose members may use the project; repeatable"},
				},
				Action: func(ctx context.Context, cmd *ucli.Command) error {
					a, err := args(cmd, 2, 2)
					if err != nil {
						return err
					}
					users, groups := cmd.StringSlice("user"), cmd.StringSlice("group")
					method, callArgs := sandboxd1.ManagerInterface+".AddProject", []any{a[0], a[1]}
					if len(users)+len(groups) > 0 { // the older AddProject for a daemon that predates them
						opts := map[string]dbus.Variant{}
						if len(users) > 0 {
							opts["Users"] = dbus.MakeVariant(users)
						}
						if len(groups) > 0 {
							opts["Groups"] = dbus.MakeVariant(groups)
						}
						method, callArgs = sandboxd1.ManagerInterface+".AddProjectWithOptions", []any{a[0], a[1], opts}
					}
					return withClient(ctx, func(c *client) error {
						if err := call(ctx, c.manager(), "adding project "+a[0], method, callArgs); err != nil {
							return err
						}
						out := outputOf(cmd)
						switch {
						case out.json:
							return out.JSON(sandboxd1.ProjectEntry{Name: a[0], Location: a[1], Origin: "added"})
						case out.quiet:
							return nil
						}
						return out.line("added project %s at %s", a[0], a[1])
					})
				},
			},
			{
				Name:  "list",
				Usage: "list the projects you may use (all of them for root and administrators)",
				Action: func(ctx context.Context, cmd *ucli.Command) error {
					if _, err := args(cmd, 0, 0); err != nil {
						return err
					}
					return withClient(ctx, func(c *client) error {
						var list []sandboxd1.ProjectEntry
						if err := call(ctx, c.manager(), "listing projects", sandboxd1.ManagerInterface+".ListProjects", nil, &list); err != nil {
							return err
						}
						return printList(outputOf(cmd), list, func(p sandboxd1.ProjectEntry) string { return p.Name },
							[]string{"NAME", "LOCATION", "FROM"}, func(p sandboxd1.ProjectEntry) []string {
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
						if err := call(ctx, c.manager(), "removing project "+a[0], sandboxd1.ManagerInterface+".RemoveProject", []any{a[0]}); err != nil {
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
