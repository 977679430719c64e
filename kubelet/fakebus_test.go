package kubelet

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"

	"github.com/godbus/dbus/v5"

	"github.com/sandboxd/sandboxd/client"
)

// call is one method call as the fake daemon received it.
type call struct {
	path   dbus.ObjectPath
	member string
	body   []any
}

// fakeDaemon is sandboxd on the far end of a pipe, without a bus: each
// call is recorded and answered by reply (a body, or an error's name).
type fakeDaemon struct {
	t     *testing.T
	reply func(call) (body []any, errName string)
	mu    sync.Mutex
	calls []call
}

// members are the methods called so far, in order.
func (d *fakeDaemon) members() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var m []string
	for _, c := range d.calls {
		m = append(m, c.member)
	}
	return m
}

// called lists the calls of member.
func (d *fakeDaemon) called(member string) []call {
	d.mu.Lock()
	defer d.mu.Unlock()
	var cs []call
	for _, c := range d.calls {
		if c.member == member {
			cs = append(cs, c)
		}
	}
	return cs
}

// connect is Config.Connect: a new client on a pipe to d.
func (d *fakeDaemon) connect(ctx context.Context) (*client.Client, error) {
	near, far := net.Pipe()
	go d.serve(far)
	conn, err := dbus.NewConn(near)
	if err != nil {
		return nil, err
	}
	if err := conn.Auth(nil); err != nil {
		return nil, err
	}
	c := client.New(conn)
	d.t.Cleanup(func() { c.Close() })
	return c, nil
}

func (d *fakeDaemon) serve(far net.Conn) {
	defer far.Close()
	in := bufio.NewReader(far)
	if _, err := in.ReadByte(); err != nil {
		return
	}
	for {
		line, err := in.ReadString('\n')
		if err != nil {
			return
		}
		switch line = strings.TrimSpace(line); {
		case line == "AUTH":
			far.Write([]byte("REJECTED EXTERNAL\r\n"))
		case strings.HasPrefix(line, "AUTH "):
			far.Write([]byte("OK 0123456789abcdef0123456789abcdef\r\n"))
		case line == "BEGIN":
			for {
				msg, err := dbus.DecodeMessage(in)
				if err != nil {
					return
				}
				c := call{body: msg.Body}
				c.path, _ = msg.Headers[dbus.FieldPath].Value().(dbus.ObjectPath)
				c.member, _ = msg.Headers[dbus.FieldMember].Value().(string)
				d.mu.Lock()
				d.calls = append(d.calls, c)
				d.mu.Unlock()
				out, errName := d.reply(c)
				r := &dbus.Message{Type: dbus.TypeMethodReply, Body: out,
					Headers: map[dbus.HeaderField]dbus.Variant{dbus.FieldReplySerial: dbus.MakeVariant(msg.Serial())}}
				if errName != "" {
					r.Type = dbus.TypeError
					r.Headers[dbus.FieldErrorName] = dbus.MakeVariant(errName)
					r.Body = []any{"refused by the fake daemon"}
				}
				if len(r.Body) > 0 {
					r.Headers[dbus.FieldSignature] = dbus.MakeVariant(dbus.SignatureOf(r.Body...))
				}
				if err := r.EncodeTo(far, binary.LittleEndian); err != nil {
					return
				}
			}
		}
	}
}

// noDaemon is a Connect that finds no sandboxd, and says it was called.
func noDaemon(called *bool) func(context.Context) (*client.Client, error) {
	return func(context.Context) (*client.Client, error) {
		*called = true
		return nil, errors.New("no sandboxd in this test")
	}
}
