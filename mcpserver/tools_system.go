package mcpserver

import (
	"context"
	"errors"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/client"
)

// The tool about a booted sandbox's own systemd (sandbox_create's boot).

type systemOut struct {
	State  string   `json:"state" jsonschema:"its systemd's state, as systemctl is-system-running says it: starting (or offline) while it boots, running, degraded when a unit failed, stopping, offline once it ended"`
	Failed []string `json:"failed" jsonschema:"its failed units (journalctl -u UNIT with exec and root says why)"`
}

// errNotBooted marks system_status asked of a sandbox made without boot:
// waiting or retrying will not help, another sandbox will (its hint says
// so, rather than WrongState's).
var errNotBooted = errors.New("it runs no systemd of its own")

func (s *server) addSystemTools(m *mcp.Server) {
	add(s, m, &mcp.Tool{Name: "system_status", Annotations: readOnly("Booted sandbox's system"),
		Description: "Show how the systemd of a sandbox made with boot is: its state (wait for running or degraded after sandbox_create before starting services) and its failed units. Only for a sandbox created with boot."},
		s.system)
}

func (s *server) system(ctx context.Context, in sandboxArg) (systemOut, error) {
	sb, err := s.sandbox(ctx, in.Sandbox)
	if err != nil {
		return systemOut{}, err
	}
	state, failed, err := sb.System(ctx)
	if err != nil {
		// WrongState is the daemon's answer for a sandbox not booted;
		// its Boot, which never changes, tells that from another state.
		if errors.Is(err, client.ErrWrongState) {
			if st, serr := sb.Status(ctx); serr == nil && !st.Boot {
				return systemOut{}, fmt.Errorf("%w (%w)", err, errNotBooted)
			}
		}
		return systemOut{}, err
	}
	if failed == nil {
		failed = []string{}
	}
	return systemOut{State: state, Failed: failed}, nil
}
