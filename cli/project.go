package cli

import (
	"context"
	"strings"

	ucli "github.com/urfave/cli/v3"

	sbclient "github.com/sandboxd/sandboxd/client"
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
				Flags:     projectAccessFlags(),
				Action: func(ctx context.Context, cmd *ucli.Command) error {
					a, err := args(cmd, 2, 2)
					if err != nil {
						return err
					}
					opts := projectAccess(cmd)
					return withClient(ctx, func(c *client) error {
						if err := c.api.AddProject(ctx, a[0], a[1], opts); err != nil {
							return fromBus("adding project "+a[0], err)
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
				Name:      "adopt",
				Usage:     "make a directory a project where it lives (yours; any owner's for administrators)",
				ArgsUsage: "NAME PATH [PATH...]",
				Description: `Makes the directory at PATH project NAME without moving it from the
host's point of view: on the pool's btrfs a subvolume is made beside it,
filled with reflinks and swapped in by one rename; elsewhere its files
go into a volume of the pool, mounted back at PATH by a mount unit that
survives reboots. Owners, modes, times, hard links, xattrs, ACLs,
sockets and holes are kept. Sandboxes show it at PATH. A directory a
process uses is refused, naming the processes and their units: stop them
first, or give --restart-units to have their services stopped for the
adoption and started again after. sandboxctl project release undoes it.

A member of group sandboxd adopts a directory of its own, wherever it
lives (its home included), for itself: every entry in it must be its
own, and --user, --group, --restart-units and --freeze are for root and
administrators, who adopt any owner's directory, keeping its owners. A
directory others than root can change is copied by descriptor into a
volume of the pool and mounted back at PATH by the daemon (again at
each start), never by a mount unit.

More than one PATH (an app and its data: /srv/app /var/lib/postgresql)
makes one project of them all, in one volume that holds each at its own
path: sandboxes see each where the host does, and a snapshot, a diff or
a promotion covers them all at once. --freeze names host services that
write them: they are frozen while the files move, and while a sandbox's
base is snapshotted (a few milliseconds), so that each holds their
writes at one point.`,
				Flags: append(projectAccessFlags(), &ucli.BoolFlag{Name: "restart-units",
					Usage: "stop the services whose processes use the directory for the adoption, and start them again"},
					&ucli.StringSliceFlag{Name: "freeze", Usage: "a host service that writes the project (repeat it), frozen while sandboxes' bases are snapshotted"}),
				Action: func(ctx context.Context, cmd *ucli.Command) error {
					a, err := args(cmd, 2, -1)
					if err != nil {
						return err
					}
					opts := projectAccess(cmd)
					opts.RestartUnits = cmd.Bool("restart-units")
					opts.MorePaths, opts.FreezeUnits = a[2:], cmd.StringSlice("freeze")
					return withClient(ctx, func(c *client) error {
						if err := c.api.AdoptProject(ctx, a[0], a[1], opts); err != nil {
							return fromBus("adopting "+strings.Join(a[1:], ", ")+" as project "+a[0], err)
						}
						out := outputOf(cmd)
						switch {
						case out.json:
							return out.JSON(map[string]any{"name": a[0], "paths": a[1:], "adopted": true})
						case out.quiet:
							return nil
						}
						return out.line("adopted %s as project %s", strings.Join(a[1:], ", "), a[0])
					})
				},
			},
			{
				Name:      "release",
				Usage:     "undo an adoption: a plain directory again, with the project's files (yours; any for administrators)",
				ArgsUsage: "NAME",
				Action: func(ctx context.Context, cmd *ucli.Command) error {
					a, err := args(cmd, 1, 1)
					if err != nil {
						return err
					}
					return withClient(ctx, func(c *client) error {
						if err := c.api.ReleaseProject(ctx, a[0]); err != nil {
							return fromBus("releasing project "+a[0], err)
						}
						return outputOf(cmd).line("released project %s", a[0])
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
						list, err := c.api.Projects(ctx)
						if err != nil {
							return fromBus("listing projects", err)
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
						if err := c.api.RemoveProject(ctx, a[0]); err != nil {
							return fromBus("removing project "+a[0], err)
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

// projectAccessFlags are who may use a project add or adopt registers.
func projectAccessFlags() []ucli.Flag {
	return []ucli.Flag{
		&ucli.StringSliceFlag{Name: "user", Usage: "a user (name or uid) who may use the project; repeatable (default: the directory's owner)"},
		&ucli.StringSliceFlag{Name: "group", Usage: "a group (name or gid) whose members may use the project; repeatable"},
	}
}

func projectAccess(cmd *ucli.Command) sbclient.ProjectOptions {
	return sbclient.ProjectOptions{Users: cmd.StringSlice("user"), Groups: cmd.StringSlice("group")}
}
