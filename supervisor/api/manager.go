package api

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/sandboxd/sandboxd/sandboxd1"
	"github.com/sandboxd/sandboxd/supervisor"
	"github.com/sandboxd/sandboxd/supervisor/adopt"
	"github.com/sandboxd/sandboxd/supervisor/api/options"
	"github.com/sandboxd/sandboxd/supervisor/state"
)

// manager implements org.sandboxd1.Manager on /org/sandboxd1. godbus
// exports every method of it that returns *dbus.Error, under its Go name;
// the dbus.Sender argument is filled by godbus and is not part of the
// D-Bus signature.
type manager struct{ s *Server }

// CreateSandbox(s project, a{sv} options) -> (s id, o object)
func (m manager) CreateSandbox(sender dbus.Sender, project string, opts map[string]dbus.Variant) (string, dbus.ObjectPath, *dbus.Error) {
	s, start := m.s, time.Now()
	r, derr := s.begin(sender, "CreateSandbox")
	if derr != nil {
		return "", "", derr
	}
	if !s.access.MayCreate(r.who) {
		return "", "", s.end(r, "", dbusError(sandboxd1.ErrorAccessDenied,
			"creating a sandbox of %q: uid %d may not create sandboxes (not root, nor a creator by uid or group)", project, r.who.UID))
	}
	co, err := options.Create(opts)
	if err != nil {
		return "", "", s.end(r, "", dbusError(sandboxd1.ErrorInvalidArgs, "creating a sandbox of %q: %v", project, err))
	}
	co.Project = project
	co.Owner = r.who.UID
	sb, err := s.sup.Create(r.ctx, co)
	if err != nil {
		// A create that could not undo itself leaves a record (creating)
		// for Reconcile: the change event announces it.
		return "", "", s.end(r, "", fromSupervisor(err))
	}
	if !sandboxd1.ValidID(sb.ID) {
		return "", "", s.end(r, sb.ID, dbusError(sandboxd1.ErrorFailed, "created sandbox %q, whose id cannot name a D-Bus object", sb.ID))
	}
	// Its state read again: it may be gone already (expired, destroyed),
	// and the change event announced that.
	if err := s.SandboxChanged(context.WithoutCancel(r.ctx), sb.ID); err != nil {
		s.log.Error("announcing a new sandbox", "SANDBOX_ID", sb.ID, "error", err)
	}
	s.rooms.Metrics.CreateTook(time.Since(start))
	return sb.ID, sandboxd1.SandboxPath(sb.ID), s.end(r, sb.ID, nil)
}

// ListSandboxes() -> a(ssssuto): the sandboxes the caller may see, oldest
// first.
func (m manager) ListSandboxes(sender dbus.Sender) ([]sandboxd1.ListEntry, *dbus.Error) {
	s := m.s
	r, derr := s.begin(sender, "ListSandboxes")
	if derr != nil {
		return nil, derr
	}
	out := []sandboxd1.ListEntry{} // never nil: godbus sends an empty array either way, but be plain
	for _, e := range s.sup.Entries() {
		if r.who.Sees(e.Owner) && sandboxd1.ValidID(e.ID) && !e.Pool {
			out = append(out, listEntry(s.sup.Current(e)))
		}
	}
	return out, s.end(r, "", nil)
}

func listEntry(e state.Entry) sandboxd1.ListEntry {
	return sandboxd1.ListEntry{
		ID: e.ID, Name: e.Name, Project: e.Project, State: string(e.State), Owner: e.Owner,
		Created: micros(e.Created), Object: sandboxd1.SandboxPath(e.ID),
	}
}

// FindSandbox(s sandbox) -> (ssssuto): the sandbox the caller may see
// whose id or name is sandbox, or else the only one whose id starts with
// it, as sandboxctl resolves its argument: one lookup where a listing of
// every sandbox cost a client 200 ms with 1,000 of them.
func (m manager) FindSandbox(sender dbus.Sender, sandbox string) (sandboxd1.ListEntry, *dbus.Error) {
	s := m.s
	r, derr := s.begin(sender, "FindSandbox")
	if derr != nil {
		return sandboxd1.ListEntry{}, derr
	}
	if sandbox == "" || len(sandbox) > maxFindArg {
		return sandboxd1.ListEntry{}, s.end(r, "", dbusError(sandboxd1.ErrorInvalidArgs,
			"a sandbox is named by its id, its name or the start of its id: 1 to %d bytes, not %d", maxFindArg, len(sandbox)))
	}
	var named *state.Entry
	var prefixed []state.Entry
	for _, e := range s.sup.Entries() {
		if !sandboxd1.ValidID(e.ID) || e.Pool {
			continue
		}
		if !r.who.Sees(e.Owner) {
			if e.ID == sandbox {
				s.log.Warn("a caller asked for another user's sandbox", "ACTION", r.action, "CALLER_UID", r.who.UID, "SANDBOX_ID", e.ID, "owner", e.Owner)
			}
			continue
		}
		switch {
		case e.ID == sandbox:
			return listEntry(s.sup.Current(e)), s.end(r, e.ID, nil)
		case e.Name == sandbox:
			named = &e
		case strings.HasPrefix(e.ID, sandbox):
			prefixed = append(prefixed, e)
		}
	}
	// A name that is also the start of another sandbox's id names
	// neither: one user's sandbox named like the start of another's id
	// must not take a command meant for that one.
	switch {
	case named != nil && len(prefixed) > 0:
		return sandboxd1.ListEntry{}, s.end(r, "", dbusError(sandboxd1.ErrorInvalidArgs,
			"%q is the name of sandbox %s and the start of the id of %s: give an id", sandbox, named.ID, prefixed[0].ID))
	case named != nil:
		return listEntry(s.sup.Current(*named)), s.end(r, named.ID, nil)
	case len(prefixed) == 0:
		return sandboxd1.ListEntry{}, s.end(r, "", dbusError(sandboxd1.ErrorNoSuchSandbox, "no sandbox is called or starts with %q", sandbox))
	case len(prefixed) == 1:
		return listEntry(s.sup.Current(prefixed[0])), s.end(r, prefixed[0].ID, nil)
	}
	ids := make([]string, 0, min(len(prefixed), 10))
	for _, e := range prefixed[:cap(ids)] {
		ids = append(ids, e.ID)
	}
	return sandboxd1.ListEntry{}, s.end(r, "", dbusError(sandboxd1.ErrorInvalidArgs,
		"%q is the start of %d sandboxes' ids (%s): give more of it", sandbox, len(prefixed), strings.Join(ids, ", ")))
}

// maxFindArg bounds FindSandbox's argument: a name is at most 64 bytes.
const maxFindArg = 256

// GetSandbox(s id) -> o object
func (m manager) GetSandbox(sender dbus.Sender, id string) (dbus.ObjectPath, *dbus.Error) {
	s := m.s
	r, derr := s.begin(sender, "GetSandbox")
	if derr != nil {
		return "", derr
	}
	if _, derr := s.lookup(r, id); derr != nil {
		return "", s.end(r, id, derr)
	}
	return sandboxd1.SandboxPath(id), s.end(r, id, nil)
}

// DestroySandbox(s id)
func (m manager) DestroySandbox(sender dbus.Sender, id string) *dbus.Error {
	s := m.s
	r, derr := s.begin(sender, "DestroySandbox")
	if derr != nil {
		return derr
	}
	return s.end(r, id, s.destroy(r, id))
}

// ListProjects() -> a(sss): the projects the caller may use, by name: its
// name, its location and where it comes from (config or added). Root and
// admins see every project.
func (m manager) ListProjects(sender dbus.Sender) ([]sandboxd1.ProjectEntry, *dbus.Error) {
	s := m.s
	r, derr := s.begin(sender, "ListProjects")
	if derr != nil {
		return nil, derr
	}
	out := []sandboxd1.ProjectEntry{}
	for _, p := range s.sup.Projects().List() {
		if s.sup.MayUseProject(r.ctx, r.actor, p.Name) != nil {
			continue
		}
		out = append(out, sandboxd1.ProjectEntry{Name: p.Name, Location: p.Location, Origin: p.Origin})
	}
	return out, s.end(r, "", nil)
}

// AddProject(s name, s location): registers a btrfs subvolume or a ZFS
// dataset of the pool as a project; root and admins only. Who may use it
// is its directory's owner (and its group if the directory is
// group-writable), root and admins.
func (m manager) AddProject(sender dbus.Sender, name, location string) *dbus.Error {
	return m.addProject(sender, "AddProject", name, location, nil)
}

// AddProjectWithOptions(s name, s location, a{sv} options): AddProject
// with options: Users (as) and Groups (as), names or numeric ids, who may
// use the project instead of its directory's owner.
func (m manager) AddProjectWithOptions(sender dbus.Sender, name, location string, opts map[string]dbus.Variant) *dbus.Error {
	return m.addProject(sender, "AddProjectWithOptions", name, location, opts)
}

func (m manager) addProject(sender dbus.Sender, action, name, location string, opts map[string]dbus.Variant) *dbus.Error {
	what := fmt.Sprintf("adding project %q", name)
	return m.adminProject(sender, action, name, what, "add", func(ctx context.Context) *dbus.Error {
		access, err := options.ProjectAccess(opts)
		if err != nil {
			return dbusError(sandboxd1.ErrorInvalidArgs, "%s: %v", what, err)
		}
		return fromSupervisorOrNil(m.s.sup.Projects().Add(ctx, name, location, access))
	})
}

// AdoptProject(s name, s path, a{sv} options): makes the directory at
// path project name where it lives. Root and admins adopt any owner's
// directory; a member who may create sandboxes adopts a directory of its
// own, for itself (the supervisor checks the directory and what it
// holds: adopt.Options.Caller).
func (m manager) AdoptProject(sender dbus.Sender, name, path string, opts map[string]dbus.Variant) *dbus.Error {
	what := fmt.Sprintf("adopting %s as project %q", path, name)
	return m.ownProject(sender, sandboxd1.MethodAdoptProject, name, what, "adopt", func(ctx context.Context, member *uint32) *dbus.Error {
		if m.s.rooms.Adoptions == nil {
			return noAdoptions(what)
		}
		var o adopt.Options
		for name, to := range map[string]any{sandboxd1.OptRestartUnits: &o.RestartUnits,
			sandboxd1.OptMorePaths: &o.More, sandboxd1.OptFreezeUnits: &o.Freeze} {
			if v, ok := opts[name]; ok {
				delete(opts, name)
				if err := dbus.Store([]any{v.Value()}, to); err != nil {
					return dbusError(sandboxd1.ErrorInvalidArgs, "%s: option %s: %v", what, name, err)
				}
			}
		}
		var err error
		if o.Access, err = options.ProjectAccess(opts); err != nil {
			return dbusError(sandboxd1.ErrorInvalidArgs, "%s: %v", what, err)
		}
		o.Caller = member
		return fromSupervisorOrNil(m.s.rooms.Adoptions.Adopt(ctx, name, path, o))
	})
}

// ReleaseProject(s name): undoes an adoption, leaving a plain directory
// with the project's files where it was; root and admins release any, a
// member the adoptions of its own directories.
func (m manager) ReleaseProject(sender dbus.Sender, name string) *dbus.Error {
	what := fmt.Sprintf("releasing project %q", name)
	return m.ownProject(sender, sandboxd1.MethodReleaseProject, name, what, "release",
		func(ctx context.Context, member *uint32) *dbus.Error {
			if m.s.rooms.Adoptions == nil {
				return noAdoptions(what)
			}
			if member != nil {
				return fromSupervisorOrNil(m.s.rooms.Adoptions.ReleaseOwn(ctx, name, *member))
			}
			return fromSupervisorOrNil(m.s.rooms.Adoptions.Release(ctx, name))
		})
}

// noAdoptions answers a call of the adoption room where it is not served.
func noAdoptions(what string) *dbus.Error {
	return dbusError(sandboxd1.ErrorFailed, "%s: this daemon adopts no directories", what)
}

// ownProject runs do, a change of project name that root and admins may
// make of any project, and a member who may create sandboxes of its own
// (do gets its uid as member; nil for root and admins).
func (m manager) ownProject(sender dbus.Sender, action, name, what, verb string, do func(context.Context, *uint32) *dbus.Error) *dbus.Error {
	s := m.s
	r, derr := s.begin(sender, action)
	if derr != nil {
		return derr
	}
	r.project = name
	if r.who.Admin {
		return s.end(r, "", do(r.ctx, nil))
	}
	if !s.access.MayCreate(r.who) {
		return s.end(r, "", dbusError(sandboxd1.ErrorAccessDenied,
			"%s: uid %d may not %s projects (members of group sandboxd may, their own directories; root and admins any)", what, r.who.UID, verb))
	}
	uid := r.who.UID
	return s.end(r, "", do(r.ctx, &uid))
}

// RemoveProject(s name): unregisters a project added with AddProject that
// has no sandboxes, leaving its files; root and admins only.
func (m manager) RemoveProject(sender dbus.Sender, name string) *dbus.Error {
	return m.adminProject(sender, "RemoveProject", name, fmt.Sprintf("removing project %q", name), "remove",
		func(ctx context.Context) *dbus.Error {
			return fromSupervisorOrNil(m.s.sup.Projects().Remove(ctx, name))
		})
}

// adminProject runs do, a change of project name that only root and
// admins may make (verb: "add" or "remove" projects), as call action;
// what names it in the refusal.
func (m manager) adminProject(sender dbus.Sender, action, name, what, verb string, do func(context.Context) *dbus.Error) *dbus.Error {
	s := m.s
	r, derr := s.begin(sender, action)
	if derr != nil {
		return derr
	}
	r.project = name
	if !r.who.Admin {
		return s.end(r, "", dbusError(sandboxd1.ErrorAccessDenied,
			"%s: uid %d may not %s projects (only root and admins may: [access] admin_users, admin_groups)", what, r.who.UID, verb))
	}
	return s.end(r, "", do(r.ctx))
}

// fromSupervisorOrNil is fromSupervisor of err, nil for none.
func fromSupervisorOrNil(err error) *dbus.Error {
	if err == nil {
		return nil
	}
	return fromSupervisor(err)
}

// lookup returns the sandbox id if the caller may see it.
func (s *Server) lookup(r *request, id string) (supervisor.Sandbox, *dbus.Error) {
	if !sandboxd1.ValidID(id) {
		return supervisor.Sandbox{}, invalidID(id)
	}
	sb, err := s.sup.Get(r.ctx, id)
	if errors.Is(err, supervisor.ErrNotFound) || err == nil && sb.Pool { // a pool's: nobody's yet
		return sb, noSuchSandbox(id)
	}
	if err != nil {
		return sb, fromSupervisor(fmt.Errorf("looking up sandbox %s: %w", id, err))
	}
	if !r.who.Sees(sb.Owner) {
		s.log.Warn("a caller asked for another user's sandbox", "ACTION", r.action, "CALLER_UID", r.who.UID, "SANDBOX_ID", id, "owner", sb.Owner)
		return sb, noSuchSandbox(id)
	}
	return sb, nil
}

// destroy is DestroySandbox and Sandbox.Destroy.
func (s *Server) destroy(r *request, id string) *dbus.Error {
	if _, derr := s.lookup(r, id); derr != nil {
		return derr
	}
	err := s.sup.Destroy(r.ctx, id)
	if err != nil {
		// A destroy that failed half way leaves the sandbox destroying:
		// announce that (or that it is gone after all).
		if cerr := s.SandboxChanged(context.WithoutCancel(r.ctx), id); cerr != nil {
			s.log.Error("announcing after a failed destroy", "SANDBOX_ID", id, "error", cerr)
		}
		return fromSupervisor(err)
	}
	s.mu.Lock()
	s.announceGone(id)
	s.mu.Unlock()
	return nil
}
