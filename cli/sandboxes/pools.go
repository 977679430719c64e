package sandboxes

import (
	"context"
	"fmt"

	ucli "github.com/urfave/cli/v3"

	"github.com/sandboxd/sandboxd/cli/verb"
	"github.com/sandboxd/sandboxd/internal/termsafe"
)

// Pools is `sandboxctl pools`.
func Pools() *ucli.Command {
	return &ucli.Command{
		Name:  "pools",
		Usage: "show your warm pools: the ready sandboxes your next creates claim",
		Description: `With [limits] pool (or a project's pool) set, each user keeps that many
ready sandboxes of each project he makes sandboxes of, made with the
options of his last create of it; a create with the same options claims
one instead of making one. A ready sandbox whose project was written since
it was made is never handed out (STALE counts those). Root and admins see
every user's pools.`,
		Action: func(ctx context.Context, cmd *ucli.Command) error {
			if _, err := verb.Args(cmd, 0, 0); err != nil {
				return err
			}
			return verb.WithClient(ctx, func(c *verb.Client) error {
				pools, err := c.API.ListPools(ctx)
				if err != nil {
					return verb.FromBus("listing the warm pools", err)
				}
				out := verb.OutputOf(cmd)
				if out.AsJSON {
					return out.JSON(pools)
				}
				rows := [][]string{}
				for _, p := range pools {
					note := p.Blocked
					if note == "" {
						note = "-"
					}
					rows = append(rows, []string{p.Project, fmt.Sprint(p.Owner), fmt.Sprintf("%d/%d", p.Ready, p.Size),
						fmt.Sprint(p.Claims), fmt.Sprint(p.Misses), fmt.Sprint(p.Stale), termsafe.Text(note)})
				}
				return out.Table([]string{"PROJECT", "OWNER", "READY", "CLAIMS", "MISSES", "STALE", "NOT REFILLED BECAUSE"}, rows)
			})
		},
	}
}
