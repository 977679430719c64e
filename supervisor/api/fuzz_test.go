package api

import (
	"bytes"
	"encoding/binary"
	"io"
	"log/slog"
	"maps"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/godbus/dbus/v5"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/sandboxd1"
	"github.com/sandboxd/sandboxd/supervisor/api/options/optionstest"
)

// FuzzMessage needs no testbed, but the package's TestMain boots one:
// under -fuzz the coordinator and its workers run inside it. The calls'
// options are fuzzed apart, without one (supervisor/api/options).

// maxMessage bounds FuzzMessage's input: Go minimizes an interesting
// input by trying it without each span of its bytes, which takes the
// square of its length in runs, and a few thousand bytes leave a 10 s run
// no time to fuzz. Longer inputs are skipped; they are never interesting.
const maxMessage = 1024

// FuzzMessage: whole D-Bus messages as the daemon's connection would read
// them. godbus refuses a malformed one with an error, and never panics. A method call it decodes goes where godbus would send it
// on the daemon's connection: to the exported method its path, interface
// and member name, whose arguments are decoded as godbus does
// (dbus.Store into the method's parameter types), refused cleanly when
// they do not fit, and otherwise passed to the method itself, on a server
// that is closing (which refuses at its door, touching nothing). The
// options of a CreateSandbox call go through FuzzParseOptions's checks
// (optionstest.CheckCreate).
func FuzzMessage(f *testing.F) {
	for _, m := range seedMessages() {
		for _, order := range []binary.ByteOrder{binary.LittleEndian, binary.BigEndian} {
			var b bytes.Buffer
			if err := m.EncodeTo(&b, order); err != nil || b.Len() > maxMessage {
				f.Fatalf("encoding %v: %v, or over %d bytes: %d", m, err, maxMessage, b.Len())
			}
			f.Add(b.Bytes())
		}
	}
	closing := &Server{closed: true, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	exports := exportsOf(closing)
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > maxMessage {
			return
		}
		msg, err := dbus.DecodeMessage(bytes.NewReader(data))
		if err != nil {
			// Not only the kinds DecodeMessage documents: a bad signature
			// in a header is a SignatureError. (godbus drops a connection
			// on which it reads anything but an InvalidMessageError; the
			// bus passes on only messages it has validated.)
			if msg != nil {
				t.Fatalf("DecodeMessage: %v, and a message: %v", err, msg)
			}
			return
		}
		if msg.Type != dbus.TypeMethodCall {
			return
		}
		path, _ := msg.Headers[dbus.FieldPath].Value().(dbus.ObjectPath)
		iface, _ := msg.Headers[dbus.FieldInterface].Value().(string)
		member, _ := msg.Headers[dbus.FieldMember].Value().(string)
		sender, _ := msg.Headers[dbus.FieldSender].Value().(string)
		if id, ok := sandboxd1.IDFromPath(path); ok && (!sandboxd1.ValidID(id) || sandboxd1.SandboxPathPrefix+"/"+dbus.ObjectPath(id) != path) {
			t.Fatalf("sandboxd1.IDFromPath(%q) = %q", path, id)
		}
		for _, m := range exports.lookup(path, iface, member) {
			call, passed := msg, []int(nil)
			fds := takesFDs(m.fn)
			if fds {
				var ok bool
				if call, passed, ok = withFDs(t, msg); !ok {
					continue // godbus refuses an index past the descriptors
				}
			}
			args, ok := decodeArgs(m.fn, sender, call)
			if !ok {
				closeFDs(passed)
				continue // godbus answers ErrMsgInvalidArg
			}
			if m.name == sandboxd1.ManagerInterface+".CreateSandbox" {
				optionstest.CheckCreate(t, *args[2].Interface().(*map[string]dbus.Variant))
			}
			in := make([]reflect.Value, len(args))
			for i, a := range args {
				in[i] = a.Elem()
			}
			var before map[int]string
			if fds {
				before = openFDs(t)
			}
			out := m.fn.Call(in)
			if fds {
				checkFDs(t, m.name, before, openFDs(t), passed)
			}
			derr, _ := out[len(out)-1].Interface().(*dbus.Error)
			if m.name == "org.freedesktop.DBus.Introspectable.Introspect" && path == sandboxd1.ManagerPath {
				continue // the manager's XML, served as it is
			}
			if derr == nil || derr.Name != sandboxd1.ErrorFailed && !(fds && len(passed) == 0 && derr.Name == sandboxd1.ErrorInvalidArgs) {
				t.Fatalf("%s on a closing server: %v; want %s", m.name, derr, sandboxd1.ErrorFailed)
			}
		}
	})
}

// takesFDs says whether fn takes a descriptor.
func takesFDs(fn reflect.Value) bool {
	for i := range fn.Type().NumIn() {
		if fn.Type().In(i) == reflect.TypeFor[dbus.UnixFD]() {
			return true
		}
	}
	return false
}

// withFDs does to msg what godbus's unix transport does when a message
// says it carries descriptors (FieldUnixFDs): its top-level "h" values,
// indices, become the descriptors received, here that many opened on
// /dev/null. A message with no descriptors keeps its indices, as godbus
// keeps them. False when godbus would refuse the message (an index past
// the descriptors); at most 16 are passed, as the system bus allows.
func withFDs(t *testing.T, msg *dbus.Message) (*dbus.Message, []int, bool) {
	n, _ := msg.Headers[dbus.FieldUnixFDs].Value().(uint32)
	if n == 0 {
		return msg, nil, true
	}
	if n > 16 {
		return nil, nil, false
	}
	var passed []int
	for range n {
		fd, err := unix.Open("/dev/null", unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			closeFDs(passed)
			t.Fatal(err)
		}
		passed = append(passed, fd)
	}
	out := *msg
	out.Body = slices.Clone(msg.Body)
	for i, v := range out.Body {
		switch idx := v.(type) {
		case dbus.UnixFDIndex:
			if uint32(idx) >= n {
				closeFDs(passed)
				return nil, nil, false
			}
			out.Body[i] = dbus.UnixFD(passed[idx])
		case []dbus.UnixFDIndex:
			list := make([]dbus.UnixFD, len(idx))
			for k, j := range idx {
				if uint32(j) >= n {
					closeFDs(passed)
					return nil, nil, false
				}
				list[k] = dbus.UnixFD(passed[j])
			}
			out.Body[i] = list
		}
	}
	return &out, passed, true
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// openFDs lists this process's descriptors and what each is open on.
func openFDs(t *testing.T) map[int]string {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	fds := map[int]string{}
	for _, e := range entries {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		target, err := os.Readlink("/proc/self/fd/" + e.Name())
		if err == nil { // not the directory ReadDir had open
			fds[fd] = target
		}
	}
	return fds
}

// checkFDs: a call closed only descriptors passed with it and opened none
// that outlive it; those passed that it left open are closed here (as
// they would leak in the daemon, godbus closing none).
func checkFDs(t *testing.T, name string, before, after map[int]string, passed []int) {
	t.Helper()
	var left []int
	for fd, target := range after {
		if before[fd] != target {
			t.Fatalf("%s left descriptor %d open (on %s)", name, fd, target)
		}
		if slices.Contains(passed, fd) {
			left = append(left, fd)
		}
	}
	for fd, target := range before {
		if _, open := after[fd]; !open && !slices.Contains(passed, fd) {
			t.Fatalf("%s closed descriptor %d (on %s), which the call did not pass", name, fd, target)
		}
	}
	closeFDs(left)
}

type exported struct {
	name string // interface.member
	fn   reflect.Value
}

// exportTable is what Server.export exports, as godbus finds it: the
// manager's interfaces at sandboxd1.ManagerPath, the sandboxes' at sandboxd1.SandboxPathPrefix
// and below it.
type exportTable struct{ manager, sandbox map[string][]exported }

func exportsOf(s *Server) exportTable {
	methods := func(ifaces map[string]any) map[string][]exported {
		out := map[string][]exported{}
		for iface, v := range ifaces {
			val := reflect.ValueOf(v)
			for i := range val.NumMethod() {
				mt := val.Type().Method(i)
				fn := val.Method(i)
				if fn.Type().NumOut() == 0 || fn.Type().Out(fn.Type().NumOut()-1) != reflect.TypeFor[*dbus.Error]() {
					continue
				}
				out[iface] = append(out[iface], exported{iface + "." + mt.Name, fn})
			}
		}
		return out
	}
	return exportTable{
		manager: methods(map[string]any{sandboxd1.ManagerInterface: manager{s}, "org.freedesktop.DBus.Introspectable": managerIntrospectable}),
		sandbox: methods(map[string]any{sandboxd1.SandboxInterface: sandboxObject{s}, "org.freedesktop.DBus.Properties": sandboxProperties{s}, "org.freedesktop.DBus.Introspectable": sandboxIntrospectable{s}}),
	}
}

// lookup finds the methods a call goes to (any interface's, when the call
// names none).
func (e exportTable) lookup(path dbus.ObjectPath, iface, member string) []exported {
	var ifaces map[string][]exported
	switch {
	case path == sandboxd1.ManagerPath:
		ifaces = e.manager
	case path == sandboxd1.SandboxPathPrefix || strings.HasPrefix(string(path), string(sandboxd1.SandboxPathPrefix)+"/"):
		ifaces = e.sandbox
	}
	var out []exported
	for name, methods := range ifaces {
		if iface != "" && iface != name {
			continue
		}
		for _, m := range methods {
			if m.name == name+"."+member {
				out = append(out, m)
			}
		}
	}
	return out
}

// decodeArgs makes fn's arguments from msg as godbus does: the sender and
// the message where fn takes them, the body stored into the rest.
func decodeArgs(fn reflect.Value, sender string, msg *dbus.Message) ([]reflect.Value, bool) {
	args := make([]reflect.Value, fn.Type().NumIn())
	var decode []any
	for i := range args {
		tp := fn.Type().In(i)
		args[i] = reflect.New(tp)
		switch tp {
		case reflect.TypeFor[dbus.Sender]():
			args[i].Elem().SetString(sender)
		case reflect.TypeFor[dbus.Message]():
			args[i].Elem().Set(reflect.ValueOf(*msg))
		default:
			decode = append(decode, args[i].Interface())
		}
	}
	if len(decode) != len(msg.Body) || dbus.Store(msg.Body, decode...) != nil {
		return nil, false
	}
	return args, true
}

// execWithFDs says m carries descriptors: as many as its "h" arguments
// name.
func execWithFDs(m *dbus.Message) *dbus.Message {
	m.Headers[dbus.FieldUnixFDs] = dbus.MakeVariant(uint32(2))
	return m
}

// seedMessages are a call of each exported method with zero arguments,
// and CreateSandbox, Promote and UnifiedDiff calls with options.
func seedMessages() []*dbus.Message {
	call := func(path dbus.ObjectPath, iface, member string, body ...any) *dbus.Message {
		m := &dbus.Message{Type: dbus.TypeMethodCall, Headers: map[dbus.HeaderField]dbus.Variant{
			dbus.FieldPath:        dbus.MakeVariant(path),
			dbus.FieldMember:      dbus.MakeVariant(member),
			dbus.FieldSender:      dbus.MakeVariant(":1.42"),
			dbus.FieldDestination: dbus.MakeVariant(sandboxd1.BusName),
		}, Body: body}
		if iface != "" {
			m.Headers[dbus.FieldInterface] = dbus.MakeVariant(iface)
		}
		if len(body) > 0 {
			m.Headers[dbus.FieldSignature] = dbus.MakeVariant(dbus.SignatureOf(body...))
		}
		return m
	}
	sandbox := sandboxd1.SandboxPathPrefix + "/0123456789ab"
	var msgs []*dbus.Message
	e := exportsOf(&Server{})
	for _, set := range []struct {
		path   dbus.ObjectPath
		ifaces map[string][]exported
	}{{sandboxd1.ManagerPath, e.manager}, {sandbox, e.sandbox}} {
		for _, iface := range slices.Sorted(maps.Keys(set.ifaces)) {
			for _, m := range set.ifaces[iface] {
				var body []any
				for i := range m.fn.Type().NumIn() {
					tp := m.fn.Type().In(i)
					switch tp {
					case reflect.TypeFor[dbus.Sender](), reflect.TypeFor[dbus.Message]():
					case reflect.TypeFor[dbus.Variant]():
						body = append(body, dbus.MakeVariant(""))
					default:
						body = append(body, reflect.Zero(tp).Interface())
					}
				}
				msgs = append(msgs, call(set.path, iface, strings.TrimPrefix(m.name, iface+"."), body...))
			}
		}
	}
	v := dbus.MakeVariant
	return append(msgs,
		call(sandboxd1.ManagerPath, sandboxd1.ManagerInterface, "CreateSandbox", "web", map[string]dbus.Variant{
			"MemoryMax": v(uint64(1 << 30)), "Name": v("agent-1"), "Allow": v([]string{"example.com:443"}), "ReadOnlyProject": v(true),
		}),
		call(sandboxd1.ManagerPath, sandboxd1.ManagerInterface, "CreateSandbox", "web", map[string]dbus.Variant{"TTLUSec": v(uint64(0)), "Bogus": v(int32(1))}),
		call(sandbox, sandboxd1.SandboxInterface, "Promote", map[string]dbus.Variant{"Force": v(true), "To": v("staging")}),
		call(sandbox, sandboxd1.SandboxInterface, "UnifiedDiff", map[string]dbus.Variant{"Context": v(uint32(3)), "MaxBytes": v(uint64(1 << 20))}),
		execWithFDs(call(sandbox, sandboxd1.SandboxInterface, "Exec", []string{"true"}, map[string]dbus.Variant{}, dbus.UnixFD(0), dbus.UnixFD(1), dbus.UnixFD(1))),
		call(sandbox, "", "Checkpoint", "before"),
		call(sandbox, "org.freedesktop.DBus.Properties", "Get", sandboxd1.SandboxInterface, "State"),
	)
}

// An Exec call that names descriptors but carries none gets the numbers
// themselves from godbus: the daemon's own descriptors. It is refused
// before any is touched (FuzzMessage found it: its first seed for Exec
// closed the fuzzing process's stdin, stdout and stderr).
func TestExecWithoutDescriptorsTouchesNone(t *testing.T) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	defer closeFDs(p[:])
	closing := &Server{closed: true, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	msg := dbus.Message{Type: dbus.TypeMethodCall, Headers: map[dbus.HeaderField]dbus.Variant{
		dbus.FieldPath: dbus.MakeVariant(sandboxd1.SandboxPathPrefix + "/0123456789ab"),
	}}
	_, derr := sandboxObject{closing}.Exec(":1.42", msg, []string{"true"}, nil, dbus.UnixFD(p[0]), dbus.UnixFD(p[1]), dbus.UnixFD(p[1]))
	if derr == nil || derr.Name != sandboxd1.ErrorInvalidArgs {
		t.Fatalf("Exec naming descriptors it does not carry: %v; want %s", derr, sandboxd1.ErrorInvalidArgs)
	}
	for _, fd := range p {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil {
			t.Fatalf("Exec closed descriptor %d, which the call only named: %v", fd, err)
		}
	}
}
