package sandboxes

import (
	"context"

	ucli "github.com/urfave/cli/v3"

	"github.com/sandboxd/sandboxd/cli/verb"
)

// Cache is `sandboxctl cache`.
func Cache() *ucli.Command {
	return &ucli.Command{
		Name:  "cache",
		Usage: "your cache that your sandboxes share (pip, npm, Go, cargo)",
		Description: `Each user has one cache volume, made on first need, that every sandbox of
theirs (and no one else's) sees at /var/cache/sandbox; commands there get
PIP_CACHE_DIR, npm_config_cache, GOMODCACHE, GOCACHE and CARGO_HOME
pointing into it, so that what one sandbox downloaded the next one finds.
It outlives your sandboxes, within [limits] cache_quota (2GiB by default)
for all of them together.`,
		Commands: []*ucli.Command{
			{
				Name:  "clear",
				Usage: "empty your cache",
				Action: func(ctx context.Context, cmd *ucli.Command) error {
					if _, err := verb.Args(cmd, 0, 0); err != nil {
						return err
					}
					return verb.WithClient(ctx, func(c *verb.Client) error {
						if err := c.API.ClearCache(ctx); err != nil {
							return verb.FromBus("clearing your cache", err)
						}
						out := verb.OutputOf(cmd)
						switch {
						case out.AsJSON:
							return out.JSON(map[string]any{"cleared": true})
						case out.Quiet:
							return nil
						}
						return out.Line("cleared your cache")
					})
				},
			},
		},
	}
}
