package api

import (
	"bytes"
	"encoding/binary"
	"io"
	"log/slog"
	"maps"
	"math"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/godbus/dbus/v5"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/sandboxd1"
	"github.com/sandboxd/sandboxd/supervisor"
)

// The fuzz targets need no testbed, but the package's TestMain boots one:
// under -fuzz the coordinator and its workers run inside it.
//
// Promote's and UnifiedDiff's options are read inside the methods, after
// the caller is identified on the bus and the sandbox looked up, so no
// fuzz target reaches them without a bus and a supervisor; FuzzMessage
// takes their calls as far as the server's door.

// FuzzParseOptions: CreateSandbox's options, as variants of any type.
// parseOptions never panics; it accepts a set of options exactly when it
// accepts each alone, and then sets exactly the fields those options name,
// to their values (durations exact, in µs); a refusal is valid UTF-8 and
// says each option's own refusal, which names the option.
//
// The input is a list of options, each: a name byte (below 0x80 one of
// the known names, by index; otherwise the next n&0x7f bytes are the
// name), a type byte (see variantOf) and a length byte with the value's
// bytes.
func FuzzParseOptions(f *testing.F) {
	names := knownOptions()
	u64 := func(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }
	seed := func(opts ...[]byte) []byte { return bytes.Join(opts, nil) }
	opt := func(name string, typ byte, val []byte) []byte {
		var b []byte
		if i := slices.Index(names, name); i >= 0 {
			b = append(b, byte(i))
		} else {
			b = append(append(b, 0x80|byte(len(name))), name...)
		}
		return append(append(b, typ, byte(len(val))), val...)
	}
	for _, s := range [][]byte{
		seed(opt("MemoryMax", 1, u64(1<<30)), opt("TasksMax", 1, u64(64)), opt("Name", 0, []byte("agent-1"))),
		seed(opt("CPUQuotaPerSecUSec", 1, u64(500000)), opt("RuntimeMaxUSec", 1, u64(maxUSec)), opt("TTLUSec", 1, u64(maxUSec+1))),
		seed(opt("MemoryMax", 1, u64(12))), seed(opt("MemoryMax", 1, u64(16<<20))), seed(opt("MemoryMax", 1, u64(16<<20-1))),
		seed(opt("DiskQuota", 1, u64(0)), opt("TTLUSec", 1, u64(0)), opt("Name", 0, nil)),
		seed(opt("Name", 0, []byte("0123456789ab")), opt("Name", 0, []byte("é")), opt("Allow", 4, []byte("a:1\x00b:2"))),
		seed(opt("Network", 0, []byte("allowlist")), opt("Allow", 4, []byte("example.com:443")), opt("ReadOnlyProject", 3, []byte{1})),
		seed(opt("MemoryMax", 0, []byte("1G")), opt("CPUWeight", 2, []byte{1, 0, 0, 0}), opt("ReadOnlyProject", 0, []byte("true"))),
		seed(opt("memorymax", 1, u64(1)), opt("", 0, nil), opt("Name\xff", 11, []byte("x"))),
		seed(opt("Profile", 0, []byte("default")), opt("IOWeight", 1, u64(100)), opt("MemoryHigh", 1, u64(math.MaxUint64))),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > maxInput {
			return
		}
		checkOptions(t, optionsOf(data, names))
	})
}

// maxInput bounds the fuzz targets' inputs: Go minimizes an interesting
// input by trying it without each span of its bytes, which takes the
// square of its length in runs, and a few of a thousand bytes leave a
// 10 s run no time to fuzz. Longer inputs are skipped; they are never
// interesting.
const maxInput = 256

// maxMessage bounds FuzzMessage's input, as maxInput does the others'.
const maxMessage = 4 * maxInput

// knownOptions lists CreateSandbox's options, sorted.
func knownOptions() []string { return slices.Sorted(maps.Keys(options)) }

// optionsOf reads FuzzParseOptions's input.
func optionsOf(data []byte, names []string) map[string]dbus.Variant {
	in := map[string]dbus.Variant{}
	next := func(n int) []byte {
		n = min(n, len(data))
		b := data[:n]
		data = data[n:]
		return b
	}
	for len(data) >= 3 {
		n := next(1)[0]
		name := ""
		if n < 0x80 {
			name = names[int(n)%len(names)]
		} else {
			name = string(next(int(n & 0x7f)))
		}
		typ := next(1)
		l := next(1)
		if len(typ) == 0 || len(l) == 0 {
			break
		}
		in[name] = variantOf(typ[0], next(int(l[0])))
	}
	return in
}

// variantOf makes a variant of a type chosen by typ from the bytes val.
func variantOf(typ byte, val []byte) dbus.Variant {
	num := func() uint64 {
		var b [8]byte
		copy(b[:], val)
		return binary.LittleEndian.Uint64(b[:])
	}
	switch typ % 15 {
	case 0:
		return dbus.MakeVariant(string(val))
	case 1:
		return dbus.MakeVariant(num())
	case 2:
		return dbus.MakeVariant(uint32(num()))
	case 3:
		return dbus.MakeVariant(len(val) > 0 && val[0]&1 == 1)
	case 4:
		list := strings.Split(string(val), "\x00")
		if len(val) == 0 {
			list = nil
		}
		return dbus.MakeVariant(list)
	case 5:
		return dbus.MakeVariant(int32(num()))
	case 6:
		return dbus.MakeVariant(int64(num()))
	case 7:
		return dbus.MakeVariant(math.Float64frombits(num()))
	case 8:
		return dbus.MakeVariant(val)
	case 9:
		return dbus.MakeVariant(uint16(num()))
	case 10:
		return dbus.MakeVariant(dbus.ObjectPath(val))
	case 11:
		return dbus.MakeVariant(dbus.MakeVariant(string(val)))
	case 12:
		return dbus.MakeVariant(map[string]dbus.Variant{string(val): dbus.MakeVariant(num())})
	case 13:
		return dbus.MakeVariant([]uint64{num()})
	default:
		return dbus.MakeVariant(byte(num()))
	}
}

// checkOptions checks parseOptions on in, and on each option alone.
func checkOptions(t *testing.T, in map[string]dbus.Variant) {
	t.Helper()
	got, err := parseOptions(in)
	var singles []string // each option's own refusal
	want := supervisor.CreateOptions{}
	for _, name := range slices.Sorted(maps.Keys(in)) {
		v := in[name]
		one, oneErr := parseOptions(map[string]dbus.Variant{name: v})
		if oneErr != nil {
			msg := oneErr.Error()
			says := "option " + name + " "
			if _, known := options[name]; !known {
				says = "unknown option " + strconv.Quote(name)
			}
			if !strings.HasPrefix(msg, says) {
				t.Fatalf("option %s = %v: the refusal %q does not start with %q", name, v, msg, says)
			}
			if setWant(&supervisor.CreateOptions{}, name, v) {
				t.Fatalf("option %s = %v (%s) refused, but it is of the option's type and within its bounds: %q", name, v, v.Signature(), msg)
			}
			singles = append(singles, msg)
			continue
		}
		if !setWant(&want, name, v) {
			t.Fatalf("option %s = %v (%s) accepted: it is not a known option of that type", name, v, v.Signature())
		}
		single := supervisor.CreateOptions{}
		setWant(&single, name, v)
		if !reflect.DeepEqual(one, single) {
			t.Fatalf("option %s = %v alone gives %+v; want %+v", name, v, one, single)
		}
	}
	if err != nil {
		msg := err.Error()
		if len(singles) == 0 {
			t.Fatalf("parseOptions(%v) = %q, but each option alone is accepted", in, msg)
		}
		if !utf8.ValidString(msg) {
			t.Fatalf("parseOptions(%v): the refusal %q is not valid UTF-8 (a D-Bus error could not carry it)", in, msg)
		}
		if want := strings.Join(singles, "; "); msg != want {
			t.Fatalf("parseOptions(%v) = %q; want each option's own refusal: %q", in, msg, want)
		}
		return
	}
	if len(singles) > 0 {
		t.Fatalf("parseOptions(%v) accepted options that alone are refused: %q", in, singles)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("parseOptions(%v) = %+v; want %+v", in, got, want)
	}
	if got.TTL < 0 || got.Limits.CPUQuota != nil && *got.Limits.CPUQuota < 0 || got.Limits.RuntimeMax != nil && *got.Limits.RuntimeMax < 0 {
		t.Fatalf("parseOptions(%v): a negative duration: %+v", in, got)
	}
	if got.Name != "" && supervisor.ValidateSandboxName(got.Name) != nil {
		t.Fatalf("parseOptions(%v): accepted the name %q", in, got.Name)
	}
}

// setWant sets the field option name documents to v, if v is of the
// option's type and within its bounds; false when it is not.
func setWant(o *supervisor.CreateOptions, name string, v dbus.Variant) bool {
	u, isU := v.Value().(uint64)
	s, isS := v.Value().(string)
	dur := func(d **time.Duration) bool {
		if !isU || u > uint64(math.MaxInt64/int64(time.Microsecond)) {
			return false
		}
		x := time.Duration(u) * time.Microsecond
		*d = &x
		return true
	}
	count := func(p **uint64) bool {
		*p = &u
		return isU
	}
	switch name {
	case "MemoryMax":
		// Below the floor a sandbox's init cannot start.
		return count(&o.Limits.MemoryMax) && u >= uint64(sandboxd1.MinMemoryMax)
	case "MemoryHigh":
		return count(&o.Limits.MemoryHigh)
	case "MemorySwapMax":
		return count(&o.Limits.MemorySwapMax)
	case "TasksMax":
		return count(&o.Limits.TasksMax)
	case "CPUWeight":
		return count(&o.Limits.CPUWeight)
	case "IOWeight":
		return count(&o.Limits.IOWeight)
	case "CPUQuotaPerSecUSec":
		return dur(&o.Limits.CPUQuota)
	case "RuntimeMaxUSec":
		return dur(&o.Limits.RuntimeMax)
	case "DiskQuota":
		o.DiskQuota = u
		return isU && u > 0
	case "TTLUSec":
		var d *time.Duration
		if !dur(&d) || *d == 0 {
			return false
		}
		o.TTL = *d
		return true
	case "Name":
		o.Name = s
		return isS && supervisor.ValidateSandboxName(s) == nil
	case "Profile":
		o.Profile = s
		return isS
	case "Network":
		o.Network = s
		return isS
	case "Allow":
		list, ok := v.Value().([]string)
		o.Allow = list
		return ok
	case "ReadOnlyProject":
		b, ok := v.Value().(bool)
		o.ReadOnlyProject = &b
		return ok
	case "Boot":
		b, ok := v.Value().(bool)
		o.Boot = b
		return ok
	}
	return false
}

// FuzzMessage: whole D-Bus messages as the daemon's connection would read
// them. godbus refuses a malformed one with an error, and never panics. A method call it decodes goes where godbus would send it
// on the daemon's connection: to the exported method its path, interface
// and member name, whose arguments are decoded as godbus does
// (dbus.Store into the method's parameter types), refused cleanly when
// they do not fit, and otherwise passed to the method itself, on a server
// that is closing (which refuses at its door, touching nothing). The
// options of a CreateSandbox call go through FuzzParseOptions's checks.
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
				checkOptions(t, *args[2].Interface().(*map[string]dbus.Variant))
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
