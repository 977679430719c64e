package units

import (
	"context"
	"errors"
	"fmt"

	sdbus "github.com/coreos/go-systemd/v22/dbus"
)

// SetSliceLimits bounds everything under slice name (a ".slice", such as
// OwnerSlice's) together: all of one user's sandboxes share its MemoryMax
// and TasksMax, whatever each has of its own. The slice is started as a
// transient unit with them; when it exists already (made by an earlier
// call, or implicitly by a scope placed in it), they are set on it for
// this boot, as `systemctl set-property --runtime` does. Limits with
// nothing set ask nothing of systemd.
func (m *Manager) SetSliceLimits(ctx context.Context, name string, l Limits) error {
	const op = "limiting slice"
	if err := CheckSliceName(name); err != nil {
		return fmt.Errorf("%s %s: %w", op, name, err)
	}
	props := l.properties()
	if len(props) == 0 {
		return nil
	}
	done := jobResult()
	desc := sdbus.PropDescription("sandboxd: the sandboxes of one user")
	if name == SliceRoot {
		desc = sdbus.PropDescription("sandboxd: all sandboxes")
	}
	_, err := m.conn.StartTransientUnitContext(ctx, name, "fail", append([]sdbus.Property{desc}, props...), done)
	if err == nil {
		return waitJob(ctx, op, name, done)
	}
	if werr := wrap(op, name, err); !errors.Is(werr, ErrExists) {
		return werr
	}
	if err := m.conn.SetUnitPropertiesContext(ctx, name, true, props...); err != nil {
		return wrap(op, name, err)
	}
	return nil
}
