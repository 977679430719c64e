package units

import (
	"context"
	"fmt"
	"path"
	"strings"
)

// UnitState is a loaded unit and its state, as List and Watch see it.
type UnitState struct {
	Name        string
	Description string
	// ActiveState and SubState are systemd's: "active"/"running",
	// "failed"/"failed", ...
	ActiveState, SubState string
}

// List lists the loaded units whose names match any of patterns (shell
// globs, as `systemctl list-units` takes them: "sandbox-*.scope"), in any
// state; a failed unit is listed until ResetFailed. With no patterns it
// lists every loaded unit.
func (m *Manager) List(ctx context.Context, patterns ...string) ([]UnitState, error) {
	for _, p := range patterns {
		if _, err := path.Match(p, ""); err != nil {
			return nil, fmt.Errorf("listing units matching %q: %w", p, err)
		}
	}
	units, err := m.conn.ListUnitsByPatternsContext(ctx, nil, patterns)
	if err != nil {
		return nil, fmt.Errorf("listing units matching %s: %w", strings.Join(patterns, " "), err)
	}
	states := make([]UnitState, 0, len(units))
	for _, u := range units {
		// A unit systemd loaded only to answer a question about it
		// (LoadState "not-found") does not exist.
		if u.LoadState == "not-found" {
			continue
		}
		states = append(states, UnitState{Name: u.Name, Description: u.Description, ActiveState: u.ActiveState, SubState: u.SubState})
	}
	return states, nil
}
