package sandboxes

import (
	"context"
	"strconv"

	ucli "github.com/urfave/cli/v3"

	"github.com/sandboxd/sandboxd/cli/verb"
	sbclient "github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/sandboxd1"
)

// Port is `sandboxctl port`.
func Port() *ucli.Command {
	return &ucli.Command{
		Name:      "port",
		Usage:     "reach a port of a sandbox from the host (prints where), or close it",
		ArgsUsage: "SANDBOX PORT",
		Description: `Exposes PORT of the sandbox's own loopback (127.0.0.1:PORT inside it) on
this host, whatever the sandbox's network (none, allowlist or host), and
prints where: a unix socket only the sandbox's owner and root may connect
to, such as

   curl --unix-socket "$(sandboxctl port web 8000)" http://localhost/

With --tcp, also a loopback TCP port (127.0.0.1:N, printed instead),
which refuses connections of anyone but the owner and root. A sandbox
exposes at most 16 ports; they close when it is destroyed, or with
--close. After sandboxd restarts they are exposed again: the socket's
path stays, a TCP port gets a new number.`,
		Flags: []ucli.Flag{
			&ucli.BoolFlag{Name: "tcp", Usage: "also listen on a loopback TCP port, and print its address"},
			&ucli.BoolFlag{Name: "close", Usage: "stop exposing PORT"},
		},
		Action: verb.OnSandbox(2, func(ctx context.Context, cmd *ucli.Command, c *verb.Client, e sandboxd1.ListEntry, rest []string) error {
			port, err := strconv.ParseUint(rest[0], 10, 16)
			if err != nil {
				return verb.Usage("%s is not a port (1 to 65535)", verb.Quote(rest[0]))
			}
			out := verb.OutputOf(cmd)
			what := "port " + rest[0] + " of sandbox " + verb.SandboxLabel(e)
			if cmd.Bool("close") {
				if err := c.Handle(e).ClosePort(ctx, uint16(port)); err != nil {
					return verb.FromBus("closing "+what, err)
				}
				switch {
				case out.AsJSON:
					return out.JSON(map[string]any{"sandbox": e.ID, "port": port, "closed": true})
				case out.Quiet:
					return nil
				}
				return out.Line("closed %s", what)
			}
			addr, err := c.Handle(e).ExposePort(ctx, uint16(port), sbclient.ExposeOptions{TCP: cmd.Bool("tcp")})
			if err != nil {
				return verb.FromBus("exposing "+what, err)
			}
			if out.AsJSON {
				return out.JSON(map[string]any{"sandbox": e.ID, "port": port, "address": addr})
			}
			return out.Line("%s", addr)
		}),
	}
}
