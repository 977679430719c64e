package api

import (
	"github.com/godbus/dbus/v5"

	"github.com/sandboxd/sandboxd/sandboxd1"
)

// ClearCache(): empties the caller's cache volume, which its sandboxes
// share at /var/cache/sandbox: the caller's own only, whoever calls.
func (m manager) ClearCache(sender dbus.Sender) *dbus.Error {
	s := m.s
	r, derr := s.begin(sender, sandboxd1.MethodClearCache)
	if derr != nil {
		return derr
	}
	if !s.access.MayCreate(r.who) {
		return s.end(r, "", dbusError(sandboxd1.ErrorAccessDenied,
			"clearing the cache of uid %d: it may not create sandboxes, and has no cache", r.who.UID))
	}
	if s.rooms.Caches == nil {
		return s.end(r, "", dbusError(sandboxd1.ErrorFailed, "clearing the cache of uid %d: sandboxes have no caches here", r.who.UID))
	}
	if err := s.rooms.Caches.Clear(r.ctx, r.who.UID); err != nil {
		return s.end(r, "", fromSupervisor(err))
	}
	return s.end(r, "", nil)
}
