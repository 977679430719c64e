package projects

import (
	"context"
	"path/filepath"
	"strings"

	ucli "github.com/urfave/cli/v3"

	"github.com/sandboxd/sandboxd/cli/verb"
	sbclient "github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/internal/rootonly"
	"github.com/sandboxd/sandboxd/sandboxd1"
)

// Command is `sandboxctl project` and its verbs: add, adopt, release, list
// and remove.
func Command() *ucli.Command {
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
					a, err := verb.Args(cmd, 2, 2)
					if err != nil {
						return err
					}
					opts := projectAccess(cmd)
					return verb.WithClient(ctx, func(c *verb.Client) error {
						if err := c.API.AddProject(ctx, a[0], a[1], opts); err != nil {
							return verb.FromBus("adding project "+a[0], err)
						}
						out := verb.OutputOf(cmd)
						switch {
						case out.AsJSON:
							return out.JSON(sandboxd1.ProjectEntry{Name: a[0], Location: a[1], Origin: "added"})
						case out.Quiet:
							return nil
						}
						return out.Line("added project %s at %s", a[0], a[1])
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
volume of the pool. Where every directory above it is root's alone (a
service's /var/lib/postgresql) it is bound back at PATH by a mount unit,
mounted at boot before services; elsewhere (a home's ~/calc, which its
owner could rename) the daemon mounts it onto the directory itself,
again each time it starts, never by a mount unit: after a reboot, until
sandboxd starts, PATH shows its files as they were when adopted.

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
					a, err := verb.Args(cmd, 2, -1)
					if err != nil {
						return err
					}
					opts := projectAccess(cmd)
					opts.RestartUnits = cmd.Bool("restart-units")
					opts.MorePaths, opts.FreezeUnits = a[2:], cmd.StringSlice("freeze")
					return verb.WithClient(ctx, func(c *verb.Client) error {
						if err := c.API.AdoptProject(ctx, a[0], a[1], opts); err != nil {
							return verb.FromBus("adopting "+strings.Join(a[1:], ", ")+" as project "+a[0], err)
						}
						out := verb.OutputOf(cmd)
						late := mountedAtStart(a[1:])
						switch {
						case out.AsJSON:
							return out.JSON(map[string]any{"name": a[0], "paths": a[1:], "adopted": true, "mounted_when_sandboxd_starts": late})
						case out.Quiet:
							return nil
						}
						if err := out.Line("adopted %s as project %s", strings.Join(a[1:], ", "), a[0]); err != nil {
							return err
						}
						for _, p := range late {
							if err := out.Line("note: a directory above %s is not root's alone, so sandboxd mounts the project there itself, again each time it starts: after a reboot, until sandboxd starts, %s shows its files as they were when adopted; a service that uses it must start after sandboxd (After=sandboxd.service)", p, p); err != nil {
								return err
							}
						}
						return nil
					})
				},
			},
			{
				Name:      "release",
				Usage:     "undo an adoption: a plain directory again, with the project's files (yours; any for administrators)",
				ArgsUsage: "NAME",
				Action: func(ctx context.Context, cmd *ucli.Command) error {
					a, err := verb.Args(cmd, 1, 1)
					if err != nil {
						return err
					}
					return verb.WithClient(ctx, func(c *verb.Client) error {
						if err := c.API.ReleaseProject(ctx, a[0]); err != nil {
							return verb.FromBus("releasing project "+a[0], err)
						}
						return verb.OutputOf(cmd).Line("released project %s", a[0])
					})
				},
			},
			{
				Name:  "list",
				Usage: "list the projects you may use (all of them for root and administrators)",
				Action: func(ctx context.Context, cmd *ucli.Command) error {
					if _, err := verb.Args(cmd, 0, 0); err != nil {
						return err
					}
					return verb.WithClient(ctx, func(c *verb.Client) error {
						list, err := c.API.Projects(ctx)
						if err != nil {
							return verb.FromBus("listing projects", err)
						}
						return verb.PrintList(verb.OutputOf(cmd), list, func(p sandboxd1.ProjectEntry) string { return p.Name },
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
					a, err := verb.Args(cmd, 1, 1)
					if err != nil {
						return err
					}
					return verb.WithClient(ctx, func(c *verb.Client) error {
						if err := c.API.RemoveProject(ctx, a[0]); err != nil {
							return verb.FromBus("removing project "+a[0], err)
						}
						out := verb.OutputOf(cmd)
						switch {
						case out.AsJSON:
							return out.JSON(map[string]string{"removed": a[0]})
						case out.Quiet:
							return nil
						}
						return out.Line("removed project %s (its files are untouched)", a[0])
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

// mountedAtStart are those of the adopted paths that the daemon mounts
// itself, when it starts, rather than a mount unit at boot: those with a
// directory above them that others than root can change (the daemon's
// rule, adopt_owned.go's byUnit).
func mountedAtStart(paths []string) []string {
	late := []string{}
	for _, p := range paths {
		if abs, err := filepath.Abs(p); err == nil && rootonly.Check(filepath.Dir(abs)) != nil {
			late = append(late, p)
		}
	}
	return late
}
