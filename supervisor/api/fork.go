package api

import (
	"errors"

	"github.com/godbus/dbus/v5"

	"github.com/sandboxd/sandboxd/sandboxd1"
	"github.com/sandboxd/sandboxd/supervisor/api/options"
)

// errNoForks answers Fork where the daemon serves no fork room.
var errNoForks = errors.New("forks are not served by this daemon")

// Fork(a{sv} options) -> (as ids, as not_carried) makes Count (default
// 1) forks of the sandbox as it stands, named by Names, with Spawn's
// command lines started in each; not_carried are the sandbox's running
// background processes, which the forks do not have. Each fork is the
// sandbox's owner's and counts against its bounds.
func (o sandboxObject) Fork(sender dbus.Sender, msg dbus.Message, opts map[string]dbus.Variant) ([]string, []string, *dbus.Error) {
	s := o.s
	r, id, derr := o.beginOn(sender, msg, sandboxd1.MethodFork)
	if derr != nil {
		return nil, nil, derr
	}
	if s.rooms.Forks == nil {
		return nil, nil, s.end(r, id, dbusError(sandboxd1.ErrorFailed, "forking sandbox %s: %v", id, errNoForks))
	}
	if !s.access.MayCreate(r.who) {
		return nil, nil, s.end(r, id, dbusError(sandboxd1.ErrorAccessDenied,
			"forking sandbox %s: uid %d may not create sandboxes (not root, nor a creator by uid or group)", id, r.who.UID))
	}
	fo, err := options.Fork(opts)
	if err != nil {
		return nil, nil, s.end(r, id, dbusError(sandboxd1.ErrorInvalidArgs, "forking sandbox %s: %v", id, err))
	}
	res, err := s.rooms.Forks.Fork(r.ctx, id, fo)
	if err != nil {
		return nil, nil, s.end(r, id, fromSupervisor(err))
	}
	ids := make([]string, 0, len(res.Sandboxes))
	for _, sb := range res.Sandboxes {
		ids = append(ids, sb.Record.ID)
	}
	return ids, append([]string{}, res.NotCarried...), s.end(r, id, nil)
}
