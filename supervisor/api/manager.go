package api

import (
	"context"
	"errors"
	"fmt"

	"github.com/godbus/dbus/v5"

	"github.com/sandboxd/sandboxd/supervisor"
)

// manager implements org.sandboxd1.Manager on /org/sandboxd1. godbus
// exports every method of it that returns *dbus.Error, under its Go name;
// the dbus.Sender argument is filled by godbus and is not part of the
// D-Bus signature.
type manager struct{ s *Server }

// CreateSandbox(s project, a{sv} options) -> (s id, o object)
func (m manager) CreateSandbox(sender dbus.Sender, project string, opts map[string]dbus.Variant) (string, dbus.ObjectPath, *dbus.Error) {
	s := m.s
	r, derr := s.begin(sender, "CreateSandbox")
	if derr != nil {
		return "", "", derr
	}
	if !s.access.mayCreate(r.who) {
		return "", "", s.end(r, "", dbusError(ErrorAccessDenied,
			"creating a sandbox of %q: uid %d may not create sandboxes (not root, nor a creator by uid or group)", project, r.who.uid))
	}
	co, err := parseOptions(opts)
	if err != nil {
		return "", "", s.end(r, "", dbusError(ErrorInvalidArgs, "creating a sandbox of %q: %v", project, err))
	}
	co.Project = project
	co.Owner = r.who.uid
	sb, err := s.sup.Create(r.ctx, co)
	if err != nil {
		// A create that could not undo itself leaves a record (creating)
		// for Reconcile: announce whatever now exists.
		if serr := s.Sync(r.ctx); serr != nil {
			s.log.Error("announcing after a failed create", "error", serr)
		}
		return "", "", s.end(r, "", fromSupervisor(err))
	}
	if !ValidID(sb.ID) {
		return "", "", s.end(r, sb.ID, dbusError(ErrorFailed, "created sandbox %q, whose id cannot name a D-Bus object", sb.ID))
	}
	s.mu.Lock()
	s.announce(sb.ID, sb.State)
	s.mu.Unlock()
	return sb.ID, SandboxPath(sb.ID), s.end(r, sb.ID, nil)
}

// ListSandboxes() -> a(sssuto): the sandboxes the caller may see, oldest
// first.
func (m manager) ListSandboxes(sender dbus.Sender) ([]ListEntry, *dbus.Error) {
	s := m.s
	r, derr := s.begin(sender, "ListSandboxes")
	if derr != nil {
		return nil, derr
	}
	list, err := s.sup.List(r.ctx)
	if err != nil {
		return nil, s.end(r, "", fromSupervisor(fmt.Errorf("listing sandboxes: %w", err)))
	}
	out := []ListEntry{} // never nil: godbus sends an empty array either way, but be plain
	for _, sb := range list {
		if !r.who.sees(sb.Owner) || !ValidID(sb.ID) {
			continue
		}
		out = append(out, ListEntry{
			ID: sb.ID, Project: sb.Project, State: string(sb.State), Owner: sb.Owner,
			Created: micros(sb.Created), Object: SandboxPath(sb.ID),
		})
	}
	return out, s.end(r, "", nil)
}

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
	return SandboxPath(id), s.end(r, id, nil)
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

// lookup returns the sandbox id if the caller may see it.
func (s *Server) lookup(r *request, id string) (supervisor.Sandbox, *dbus.Error) {
	if !ValidID(id) {
		return supervisor.Sandbox{}, invalidID(id)
	}
	sb, err := s.sup.Get(r.ctx, id)
	if errors.Is(err, supervisor.ErrNotFound) {
		return sb, noSuchSandbox(id)
	}
	if err != nil {
		return sb, fromSupervisor(fmt.Errorf("looking up sandbox %s: %w", id, err))
	}
	if !r.who.sees(sb.Owner) {
		s.log.Warn("a caller asked for another user's sandbox", "ACTION", r.action, "CALLER_UID", r.who.uid, "SANDBOX_ID", id, "owner", sb.Owner)
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
