package api

import (
	"context"
	"errors"
	"fmt"

	"github.com/godbus/dbus/v5"

	"github.com/sandboxd/sandboxd/sandboxd1"
	"github.com/sandboxd/sandboxd/supervisor"
)

// errNoPorts answers a port's call where the daemon serves no ports.
var errNoPorts = errors.New("this daemon exposes no ports")

// ExposePort(q port, a{sv} options) -> (s address) exposes a port of the
// sandbox's loopback on the host: a unix socket only the owner and root
// may connect to, whose path it returns, and with TCP (b) also a loopback
// TCP port, whose "127.0.0.1:N" it returns instead.
func (o sandboxObject) ExposePort(sender dbus.Sender, msg dbus.Message, port uint16, opts map[string]dbus.Variant) (string, *dbus.Error) {
	var addr string
	derr := o.onSandbox(sender, msg, sandboxd1.MethodExposePort, func(ctx context.Context, id string) error {
		tcp := false
		for name, v := range opts {
			b, ok := v.Value().(bool)
			if name != sandboxd1.OptTCP || !ok {
				return fmt.Errorf("option %s: unknown, or not of type b (known: %s b): %w", name, sandboxd1.OptTCP, supervisor.ErrInvalid)
			}
			tcp = b
		}
		if o.s.rooms.Ports == nil {
			return errNoPorts
		}
		var err error
		addr, err = o.s.rooms.Ports.Expose(ctx, id, port, tcp)
		return err
	})
	return addr, derr
}

// ClosePort(q port) stops exposing a port: its sockets close, and the
// connections through them.
func (o sandboxObject) ClosePort(sender dbus.Sender, msg dbus.Message, port uint16) *dbus.Error {
	return o.onSandbox(sender, msg, sandboxd1.MethodClosePort, func(ctx context.Context, id string) error {
		if o.s.rooms.Ports == nil {
			return errNoPorts
		}
		return o.s.rooms.Ports.Close(ctx, id, port)
	})
}
