package api

import (
	"github.com/godbus/dbus/v5"

	"github.com/sandboxd/sandboxd/sandboxd1"
)

// SystemStatus() -> (s state, as failed): a booted sandbox's systemd's
// state and failed units (sandboxd1.MethodSystemStatus).
func (o sandboxObject) SystemStatus(sender dbus.Sender, msg dbus.Message) (string, []string, *dbus.Error) {
	s := o.s
	r, id, derr := o.beginOn(sender, msg, sandboxd1.MethodSystemStatus)
	if derr != nil {
		return "", nil, derr
	}
	c, derr := s.commandsOf(r, id)
	if derr != nil {
		return "", nil, derr
	}
	st, err := c.System(r.ctx, id, r.who.UID)
	if err != nil {
		return "", nil, s.end(r, id, fromSupervisor(err))
	}
	if st.Failed == nil {
		st.Failed = []string{}
	}
	return st.State, st.Failed, s.end(r, id, nil)
}
