package client_test

import (
	"bufio"
	"encoding/binary"
	"net"
	"strings"
	"testing"

	"github.com/godbus/dbus/v5"

	"github.com/sandboxd/sandboxd/client"
)

// sent is one method call as a peer received it off the wire.
type sent struct {
	path      dbus.ObjectPath
	iface     string
	member    string
	signature string
	body      []any
}

// fakePeer is a Client on one end of a pipe whose other end records
// each call as it came and answers it with reply(call), or with the
// error it names: the calls as sent, method, signature and options,
// without a daemon or a bus.
func fakePeer(t *testing.T, reply func(sent) (body []any, errName string)) (*client.Client, <-chan sent) {
	t.Helper()
	near, far := net.Pipe()
	calls := make(chan sent, 16)
	go func() {
		defer far.Close()
		in := bufio.NewReader(far)
		// The authentication's lines, as a bus answers them: a first
		// AUTH is refused with the mechanism it takes.
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
					c := sent{body: msg.Body}
					c.path, _ = msg.Headers[dbus.FieldPath].Value().(dbus.ObjectPath)
					c.iface, _ = msg.Headers[dbus.FieldInterface].Value().(string)
					c.member, _ = msg.Headers[dbus.FieldMember].Value().(string)
					if sig, ok := msg.Headers[dbus.FieldSignature].Value().(dbus.Signature); ok {
						c.signature = sig.String()
					}
					calls <- c
					out, errName := reply(c)
					r := &dbus.Message{Type: dbus.TypeMethodReply, Body: out,
						Headers: map[dbus.HeaderField]dbus.Variant{dbus.FieldReplySerial: dbus.MakeVariant(msg.Serial())}}
					if errName != "" {
						r.Type = dbus.TypeError
						r.Headers[dbus.FieldErrorName] = dbus.MakeVariant(errName)
					}
					if len(out) > 0 {
						r.Headers[dbus.FieldSignature] = dbus.MakeVariant(dbus.SignatureOf(out...))
					}
					if err := r.EncodeTo(far, binary.LittleEndian); err != nil {
						t.Errorf("the fake peer's reply to %s: %v", c.member, err)
						return
					}
				}
			}
		}
	}()
	conn, err := dbus.NewConn(near)
	if err != nil {
		t.Fatal(err)
	}
	if err := conn.Auth(nil); err != nil {
		t.Fatal(err)
	}
	c := client.New(conn)
	t.Cleanup(func() { c.Close() })
	return c, calls
}
