package units

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/coreos/go-systemd/v22/unit"
)

// mountUnitDir is where the persistent mount units of adopted projects
// go: the administrator's unit directory, read at boot.
var mountUnitDir = "/etc/systemd/system"

// MountUnitName is the name of the mount unit of where (an absolute
// path), as systemd names it.
func MountUnitName(where string) string { return unit.UnitNamePathEscape(where) + ".mount" }

// BindMount makes a mount unit that binds what at where, enabled for
// every boot (local-fs.target), starts it, and returns its name. The unit
// file is written whole or not at all.
func (m *Manager) BindMount(ctx context.Context, what, where string) (string, error) {
	const op = "binding a volume"
	name, path, data, err := mountUnit(op, mountDescription, what, where, "none", "bind")
	if err != nil {
		return name, err
	}
	// Bound as asked already (a caller finishing what a crash cut): left
	// as it is. A start job for a mount unit that is active does not end.
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data) {
		st, err := m.conn.ListUnitsByNamesContext(ctx, []string{name})
		if err == nil && len(st) == 1 && st[0].ActiveState == "active" {
			return name, nil
		}
	}
	if err := m.writeEnabled(ctx, op, name, path, data); err != nil {
		return name, err
	}
	return name, m.job(ctx, op, name, m.conn.StartUnitContext)
}

// PoolMount makes a mount unit that mounts the embedded pool's image
// (btrfs, by a loop device) at where, enabled for every boot
// (local-fs.target), and returns its name. The adopted volumes that
// BindMount's units bind back live in that pool, which the daemon
// mounts when it starts, after local-fs.target: without it their
// sources are not there at boot. systemd orders a bind mount after the
// mount unit of the path its What= is on, and pulls it in. The unit is
// not started: the daemon has the pool mounted already, and systemd
// counts a unit whose mount is there as active.
func (m *Manager) PoolMount(ctx context.Context, image, where string) (string, error) {
	const op = "mounting the pool at boot"
	name, path, data, err := mountUnit(op, poolDescription, image, where, "btrfs", "loop")
	if err != nil {
		return name, err
	}
	wants := filepath.Join(mountUnitDir, "local-fs.target.wants", name)
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data) {
		if _, err := os.Lstat(wants); err == nil {
			return name, nil // written and enabled before
		}
	}
	return name, m.writeEnabled(ctx, op, name, path, data)
}

// mountUnit checks what and where, serializes the mount unit that
// mounts what (of type typ, with options) at where, enabled for every
// boot, and returns its name, the path of its file and its content. A
// file at that path that is not sandboxd's is refused.
func mountUnit(op, desc, what, where, typ, options string) (name, path string, data []byte, err error) {
	name = MountUnitName(where)
	for _, p := range []string{what, where} {
		if !filepath.IsAbs(p) || filepath.Clean(p) != p || strings.ContainsAny(p, "\n\r\x00\\") {
			return name, "", nil, fmt.Errorf("%s: %q is not a path a unit file can hold", op, p)
		}
	}
	// The unit's options one per line, as go-systemd's serializer
	// writes them.
	opts := []*unit.UnitOption{
		unit.NewUnitOption("Unit", "Description", desc+where),
		unit.NewUnitOption("Unit", "Documentation", "man:sandboxctl(1)"),
		unit.NewUnitOption("Mount", "What", what),
		unit.NewUnitOption("Mount", "Where", where),
		unit.NewUnitOption("Mount", "Type", typ),
		unit.NewUnitOption("Mount", "Options", options),
		unit.NewUnitOption("Install", "WantedBy", "local-fs.target"),
	}
	data, err = io.ReadAll(unit.Serialize(opts))
	if err != nil {
		return name, "", nil, err
	}
	path = filepath.Join(mountUnitDir, name)
	if err := ours(path); err != nil {
		return name, "", nil, fmt.Errorf("%s: %w", op, err)
	}
	return name, path, data, nil
}

// writeEnabled writes data to the unit file at path whole or not at all
// (a temporary file renamed), enables the unit name and reloads the
// manager: as systemctl enable does, it then knows local-fs.target
// wants it (systemctl show's WantedBy), not only the next boot.
func (m *Manager) writeEnabled(ctx context.Context, op, name, path string, data []byte) error {
	tmp := path + ".sandboxd-tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return fmt.Errorf("%s: writing %s: %w", op, path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("%s: writing %s: %w", op, path, err)
	}
	if _, _, err := m.conn.EnableUnitFilesContext(ctx, []string{name}, false, true); err != nil {
		return wrap(op, name, err)
	}
	if err := m.conn.ReloadContext(ctx); err != nil {
		return wrap(op, name, err)
	}
	return nil
}

// mountDescription starts the Description of the units BindMount writes,
// poolDescription PoolMount's: a unit without either is not sandboxd's
// to replace or remove.
const (
	mountDescription = "sandboxd project at "
	poolDescription  = "sandboxd pool at "
)

// ours refuses a unit file at path that BindMount did not write.
func ours(path string) error {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if !strings.Contains(string(data), "Description="+mountDescription) && !strings.Contains(string(data), "Description="+poolDescription) {
		return fmt.Errorf("%s exists and is not sandboxd's: it is left as it is", path)
	}
	return nil
}

// RemoveMount stops, disables and deletes the mount unit of where that
// BindMount made; one that is not there is no error.
func (m *Manager) RemoveMount(ctx context.Context, where string) error {
	name := MountUnitName(where)
	const op = "removing a mount"
	path := filepath.Join(mountUnitDir, name)
	if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err := ours(path); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	if err := m.job(ctx, op, name, m.conn.StopUnitContext); err != nil {
		return err
	}
	if _, err := m.conn.DisableUnitFilesContext(ctx, []string{name}, false); err != nil {
		return wrap(op, name, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s: %w", op, err)
	}
	if err := m.conn.ReloadContext(ctx); err != nil {
		return wrap(op, name, err)
	}
	return nil
}

// StopService stops the service name and waits for its job.
func (m *Manager) StopService(ctx context.Context, name string) error {
	const op = "stopping service"
	if err := CheckServiceName(name); err != nil {
		return fmt.Errorf("%s %s: %w", op, name, err)
	}
	return m.job(ctx, op, name, m.conn.StopUnitContext)
}

// StartService starts the service name and waits for its job.
func (m *Manager) StartService(ctx context.Context, name string) error {
	const op = "starting service"
	if err := CheckServiceName(name); err != nil {
		return fmt.Errorf("%s %s: %w", op, name, err)
	}
	return m.job(ctx, op, name, m.conn.StartUnitContext)
}

// job runs a job of unit name that start queues (systemd's StartUnit,
// StopUnit, ...), replacing any other, and waits for its result.
func (m *Manager) job(ctx context.Context, op, name string, start func(context.Context, string, string, chan<- string) (int, error)) error {
	done := jobResult()
	if _, err := start(ctx, name, "replace", done); err != nil {
		return wrap(op, name, err)
	}
	return waitJob(ctx, op, name, done)
}
