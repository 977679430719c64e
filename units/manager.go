package units

import (
	"context"
	"fmt"

	sdbus "github.com/coreos/go-systemd/v22/dbus"
)

// Manager is a connection to systemd on the system bus. It is safe for
// concurrent use. Close it when done.
type Manager struct {
	conn *sdbus.Conn
	caps Capabilities
}

// Connect opens a connection to systemd on the system bus and reads what it
// can do. ctx bounds the connecting only: the connection lives until Close.
func Connect(ctx context.Context) (*Manager, error) {
	type result struct {
		conn    *sdbus.Conn
		version string
		err     error
	}
	// go-systemd ties a connection's life to the context it was dialled
	// with, and its Hello and version read take no context: dial with one
	// that never ends and give up waiting when ctx does.
	ch := make(chan result, 1)
	go func() {
		conn, err := sdbus.NewSystemConnectionContext(context.Background())
		if err != nil {
			ch <- result{err: err}
			return
		}
		version, err := conn.GetManagerProperty("Version")
		ch <- result{conn, version, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			if r.conn != nil {
				r.conn.Close()
			}
			return nil, fmt.Errorf("connecting to systemd on the system bus: %w", r.err)
		}
		return &Manager{conn: r.conn, caps: capabilitiesFor(detectLayout(), parseVersion(r.version))}, nil
	case <-ctx.Done():
		go func() {
			if r := <-ch; r.conn != nil {
				r.conn.Close()
			}
		}()
		return nil, fmt.Errorf("connecting to systemd on the system bus: %w", ctx.Err())
	}
}

// Close ends the connection. Scopes live on without it.
func (m *Manager) Close() { m.conn.Close() }

// Capabilities says what systemd and the cgroup layout let m do.
func (m *Manager) Capabilities() Capabilities { return m.caps }
