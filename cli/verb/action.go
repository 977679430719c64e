package verb

import (
	"context"
	"strings"

	ucli "github.com/urfave/cli/v3"

	"github.com/sandboxd/sandboxd/sandboxd1"
)

// UsageLine is how cmd is called: "sandboxctl exec [options] SANDBOX -- COMMAND...".
func UsageLine(cmd *ucli.Command) string {
	line := cmd.FullName()
	if !strings.HasPrefix(line, "sandboxctl") {
		line = "sandboxctl " + line
	}
	if len(cmd.VisibleFlags()) > 0 {
		line += " [options]"
	}
	if cmd.ArgsUsage != "" {
		line += " " + cmd.ArgsUsage
	}
	return line
}

// Args checks that cmd got between min and max positional arguments
// (max < 0: any number).
func Args(cmd *ucli.Command, min, max int) ([]string, error) {
	a := cmd.Args().Slice()
	if len(a) < min || (max >= 0 && len(a) > max) {
		return nil, Usage("%s takes %s (usage: %s)", cmd.Name, cmd.ArgsUsage, UsageLine(cmd))
	}
	return a, nil
}

// WithClient runs fn with a connection to the daemon.
func WithClient(ctx context.Context, fn func(*Client) error) error {
	c, err := Connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	return fn(c)
}

// OnSandbox is the Action of a verb about one sandbox: it takes nargs
// arguments, the first naming the sandbox, connects, finds the sandbox,
// and runs fn with it and the other arguments.
func OnSandbox(nargs int, fn func(ctx context.Context, cmd *ucli.Command, c *Client, e sandboxd1.ListEntry, rest []string) error) ucli.ActionFunc {
	return func(ctx context.Context, cmd *ucli.Command) error {
		a, err := Args(cmd, nargs, nargs)
		if err != nil {
			return err
		}
		return WithClient(ctx, func(c *Client) error {
			e, err := c.Resolve(ctx, a[0])
			if err != nil {
				return err
			}
			return fn(ctx, cmd, c, e, a[1:])
		})
	}
}

// OnSandboxes is the Action of a verb about all the sandboxes the caller
// may see: it takes no arguments, connects and lists them for fn.
func OnSandboxes(fn func(ctx context.Context, cmd *ucli.Command, c *Client, entries []sandboxd1.ListEntry) error) ucli.ActionFunc {
	return func(ctx context.Context, cmd *ucli.Command) error {
		if _, err := Args(cmd, 0, 0); err != nil {
			return err
		}
		return WithClient(ctx, func(c *Client) error {
			entries, err := c.List(ctx)
			if err != nil {
				return err
			}
			return fn(ctx, cmd, c, entries)
		})
	}
}
