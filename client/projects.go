package client

import (
	"context"
	"fmt"

	"github.com/godbus/dbus/v5"

	"github.com/sandboxd/sandboxd/sandboxd1"
)

// Projects an administrator registers over the bus (those of
// sandboxd.toml are the configuration's), and the caller's cache.

// ProjectOptions say who may use a project AddProject registers; empty,
// the owner of its directory alone.
type ProjectOptions struct {
	// Users are user names or uids; Groups group names or gids whose
	// members may use it.
	Users, Groups []string
	// RestartUnits (AdoptProject only): the services whose processes use
	// the directory are stopped for the adoption and started again.
	RestartUnits bool
	// MorePaths (AdoptProject only): further directories adopted into the
	// same project (its data beside its app), seen each at its own path,
	// snapshotted, diffed and promoted as one.
	MorePaths []string
	// FreezeUnits (AdoptProject only): host services that write the
	// project, frozen while a sandbox's base is snapshotted.
	FreezeUnits []string
}

// wire is o as the options of AddProjectWithOptions and AdoptProject.
func (o ProjectOptions) wire() map[string]dbus.Variant {
	m := map[string]dbus.Variant{}
	if len(o.Users) > 0 {
		m[sandboxd1.OptUsers] = dbus.MakeVariant(o.Users)
	}
	if len(o.Groups) > 0 {
		m[sandboxd1.OptGroups] = dbus.MakeVariant(o.Groups)
	}
	if o.RestartUnits {
		m[sandboxd1.OptRestartUnits] = dbus.MakeVariant(true)
	}
	if len(o.MorePaths) > 0 {
		m[sandboxd1.OptMorePaths] = dbus.MakeVariant(o.MorePaths)
	}
	if len(o.FreezeUnits) > 0 {
		m[sandboxd1.OptFreezeUnits] = dbus.MakeVariant(o.FreezeUnits)
	}
	return m
}

// AddProject registers location, a btrfs subvolume or ZFS dataset of the
// daemon's pool, as project name; it outlives a restart of the daemon.
// Administrators only (ErrAccessDenied); a name taken is ErrExists.
func (c *Client) AddProject(ctx context.Context, name, location string, opts ProjectOptions) error {
	op := fmt.Sprintf("adding project %q", name)
	if len(opts.Users)+len(opts.Groups) == 0 {
		// The older method, which a daemon from before the options knows.
		return c.callManager(ctx, op, sandboxd1.MethodAddProject, []any{name, location})
	}
	return c.callManager(ctx, op, sandboxd1.MethodAddProjectWithOptions, []any{name, location, opts.wire()})
}

// RemoveProject forgets a project AddProject registered; its files stay.
// One with sandboxes is ErrWrongState; one of sandboxd.toml's is
// ErrInvalidArgs (it is removed there).
func (c *Client) RemoveProject(ctx context.Context, name string) error {
	return c.callManager(ctx, fmt.Sprintf("removing project %q", name), sandboxd1.MethodRemoveProject, []any{name})
}

// AdoptProject makes the directory at path project name where it lives:
// the host keeps seeing it at path, and sandboxes show it there.
// Administrators only.
func (c *Client) AdoptProject(ctx context.Context, name, path string, opts ProjectOptions) error {
	return c.callManager(ctx, fmt.Sprintf("adopting %s as project %q", path, name), sandboxd1.MethodAdoptProject, []any{name, path, opts.wire()})
}

// ReleaseProject undoes AdoptProject: the path becomes a plain directory
// holding the project's files as they are, and the project is gone.
func (c *Client) ReleaseProject(ctx context.Context, name string) error {
	return c.callManager(ctx, fmt.Sprintf("releasing project %q", name), sandboxd1.MethodReleaseProject, []any{name})
}

// ClearCache empties the caller's cache volume, which every sandbox of
// the caller's sees at /var/cache/sandbox (pip's, npm's, Go's, cargo's).
func (c *Client) ClearCache(ctx context.Context) error {
	return c.callManager(ctx, "clearing the cache", sandboxd1.MethodClearCache, nil)
}
