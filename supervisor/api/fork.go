package api

import (
	"errors"
	"fmt"

	"github.com/godbus/dbus/v5"

	"github.com/sandboxd/sandboxd/sandboxd1"
	"github.com/sandboxd/sandboxd/supervisor/fork"
)

// errNoForks answers Fork where the daemon serves no fork room.
var errNoForks = errors.New("forks are not served by this daemon")

// Fork(a{sv} options) -> (as ids, as not_carried) makes Count (default
// 1) forks of the sandbox as it stands, named by Names, with Spawn's
// command lines started in each; not_carried are the sandbox's running
// background processes, which the forks do not have. Each fork is the
// sandbox's owner's and counts against its bounds.
func (o sandboxObject) Fork(sender dbus.Sender, msg dbus.Message, options map[string]dbus.Variant) ([]string, []string, *dbus.Error) {
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
	fo, err := forkOptions(options)
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

// forkOptions is Fork's a{sv}; an unknown option or a value of the wrong
// type is refused by name.
func forkOptions(in map[string]dbus.Variant) (fork.Options, error) {
	var o fork.Options
	var errs []error
	for name, v := range in {
		var err error
		switch name {
		case sandboxd1.OptCount:
			var n uint32
			if err = dbus.Store([]any{v.Value()}, &n); err == nil {
				if n == 0 || n > fork.MaxCount {
					err = fmt.Errorf("%d: make 1 to %d forks at once", n, fork.MaxCount)
				}
				o.Count = int(n)
			}
		case sandboxd1.OptNames:
			err = dbus.Store([]any{v.Value()}, &o.Names)
		case sandboxd1.OptSpawn:
			err = dbus.Store([]any{v.Value()}, &o.Spawn)
		default:
			err = fmt.Errorf("not an option of Fork (%s, %s, %s)", sandboxd1.OptCount, sandboxd1.OptNames, sandboxd1.OptSpawn)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("option %s (%s): %v", name, v.Signature(), err))
		}
	}
	return o, errors.Join(errs...)
}
