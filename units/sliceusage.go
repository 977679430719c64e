package units

import (
	"context"
	"fmt"
)

// SliceRoot is the slice all of sandboxd's slices live under (OwnerSlice
// is "sandboxd-u<uid>.slice": a "-" is a level of the tree).
const SliceRoot = "sandboxd.slice"

// SliceUsage is what everything under a slice uses now, and the limits
// set on it.
type SliceUsage struct {
	// Loaded: systemd knows the slice (it has held a scope this boot, or
	// was given limits); when not, the amounts are unknown.
	Loaded bool
	// Memory in bytes (MemoryCurrent) and Tasks (TasksCurrent) of
	// everything under the slice.
	Memory, Tasks Amount
	Limits        Limits
}

// SliceUsage reads slice name's usage and limits. A slice systemd does
// not know is not an error: it holds nothing.
func (m *Manager) SliceUsage(ctx context.Context, name string) (SliceUsage, error) {
	const op = "reading usage of slice"
	if err := CheckSliceName(name); err != nil {
		return SliceUsage{}, fmt.Errorf("%s %s: %w", op, name, err)
	}
	// The Unit properties first, as Usage does: asking for a unit that
	// is not loaded makes systemd load an empty one just to answer.
	unit, err := m.conn.GetUnitPropertiesContext(ctx, name)
	if err != nil {
		return SliceUsage{}, wrap(op, name, err)
	}
	if state, _ := unit["LoadState"].(string); state != "loaded" {
		return SliceUsage{}, nil
	}
	slice, err := m.conn.GetUnitTypePropertiesContext(ctx, name, "Slice")
	if err != nil {
		return SliceUsage{}, wrap(op, name, err)
	}
	return SliceUsage{Loaded: true, Memory: amount(slice["MemoryCurrent"]), Tasks: amount(slice["TasksCurrent"]),
		Limits: limitsFrom(slice)}, nil
}
