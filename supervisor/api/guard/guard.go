package guard

import (
	"cmp"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"sync/atomic"

	"github.com/godbus/dbus/v5"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/termsafe"
	"github.com/sandboxd/sandboxd/sandboxd1"
	"github.com/sandboxd/sandboxd/supervisor/commands"
)

// Limits on what one call may carry, checked as the message is read,
// before any handler, audit line or log sees its arguments.
const (
	// MaxArgs and MaxArgvBytes bound an Exec's or ExecTerminal's argv
	// (and Try's variants): the count, and the bytes of all of them.
	MaxArgs      = 4096
	MaxArgvBytes = 128 << 10
	// MaxCheckBytes bounds Try's check, a shell line.
	MaxCheckBytes = 64 << 10
	// MaxEnvEntries and MaxEnvBytes bound an Exec's Environment option;
	// MaxWorkingDirBytes its WorkingDirectory (PATH_MAX).
	MaxEnvEntries      = 1024
	MaxEnvBytes        = 128 << 10
	MaxWorkingDirBytes = 4096
	// maxOptionName bounds an option's name: a message names an unknown
	// one.
	maxOptionName = 64
)

// fdMethods are the methods of a sandbox's object that take descriptors:
// their signature and how many. Exec takes stdin, stdout and stderr;
// ReadFileTo and WriteFileFrom one pipe.
var fdMethods = map[string]struct {
	signature string
	fds       uint32
}{
	sandboxd1.MethodExec:          {"asa{sv}hhh", 3},
	sandboxd1.MethodReadFileTo:    {"sha{sv}", 1},
	sandboxd1.MethodWriteFileFrom: {"sha{sv}", 1},
}

// The refusal object, where the server exports a Refuser: the guard
// turns a message it refuses into a call of Refuse there, so that godbus
// dispatches nothing of the original call and the caller gets a clear
// error in the ordinary way.
const (
	RefusePath      = dbus.ObjectPath("/org/sandboxd1/refused")
	RefuseInterface = "org.sandboxd1.Refused"
)

// guardLog is where the guard logs; Attach sets it.
var guardLog atomic.Pointer[slog.Logger]

// Attach gives the guard the server's log and the sessions it asks
// whether an Eval's session takes more inputs. Until then it logs to
// slog's default and refuses no Eval for a full session.
func Attach(log *slog.Logger, sessions Sessions) {
	guardLog.Store(log)
	guardSessions.Store(&sessions)
}

// ConnOptions are the options the daemon's bus connection needs: give them
// to dbus.ConnectSystemBus. godbus hands a method the descriptors of its
// own "h" arguments and closes none: a descriptor sent with a call that
// fails to decode, names an unknown method, or takes no descriptors would
// stay open in the daemon for ever. The guard sees every message as it is
// read, closes every descriptor no handler will take, and refuses calls
// that carry descriptors the method does not take or arguments too large.
// Outgoing, it closes the descriptors a method handed off (HandOff) once
// the reply that carries them is written.
func ConnOptions() []dbus.ConnOption {
	return []dbus.ConnOption{
		dbus.WithIncomingInterceptor(guard),
		dbus.WithOutgoingInterceptor(outgoing),
		dbus.WithSerialGenerator(newSerials()),
	}
}

// guard runs on godbus's reading goroutine for every message received,
// before it is dispatched; it may rewrite the message.
func guard(msg *dbus.Message) {
	fds := collectFDs(msg.Body)
	sent, _ := msg.Headers[dbus.FieldUnixFDs].Value().(uint32)
	if msg.Type != dbus.TypeMethodCall {
		// The daemon takes descriptors from no signal or reply.
		closeReceived(fds)
		return
	}
	iface, _ := msg.Headers[dbus.FieldInterface].Value().(string)
	member, _ := msg.Headers[dbus.FieldMember].Value().(string)
	reason := checkCall(msg, iface, member, sent, len(fds))
	if reason == "" {
		if busy := sessionFull(msg, iface, member); busy != "" {
			refuseAs(msg, "RefuseBusy", busy)
		}
		return
	}
	closeReceived(fds)
	if int(sent) > len(fds) {
		// godbus keeps no record of descriptors the body does not name:
		// they cannot be closed here. Say so, loudly.
		logger().Error("a call carried descriptors its arguments do not name; they stay open in the daemon",
			"BUS_SENDER", msg.Headers[dbus.FieldSender].Value(), "member", member, "descriptors", sent, "named", len(fds))
	}
	refuse(msg, fmt.Sprintf("%s: %s", member, reason))
}

// checkCall says why a call must be refused, or "" to let it through.
func checkCall(msg *dbus.Message, iface, member string, sent uint32, named int) string {
	sig, _ := msg.Headers[dbus.FieldSignature].Value().(dbus.Signature)
	path, _ := msg.Headers[dbus.FieldPath].Value().(dbus.ObjectPath)
	takes, ok := fdMethods[member]
	ok = ok && iface == sandboxd1.SandboxInterface
	switch {
	case sent == 0 && named == 0:
	case !ok:
		return fmt.Sprintf("the call carries %d file descriptors; it takes none (they were closed)", max(int(sent), named))
	case sig.String() != takes.signature || !strings.HasPrefix(string(path), string(sandboxd1.SandboxPathPrefix)+"/"):
		// Only a call that will reach its method, which closes what it
		// is given, may keep its descriptors.
		return fmt.Sprintf("the call has signature %q on %s; %s takes (%s) on a sandbox's object", sig, path, member, takes.signature)
	case sent > takes.fds || int(sent) > named:
		return fmt.Sprintf("the call carries %d file descriptors; %s takes %d, each named by an argument (they were closed)", sent, member, takes.fds)
	}
	switch {
	case iface == sandboxd1.SandboxInterface && (member == "Exec" || member == "ExecTerminal" || member == sandboxd1.MethodSpawn):
		return cmp.Or(checkArgv(msg.Body, 0, "argv"), checkExecOptions(msg.Body, 1))
	case iface == sandboxd1.SandboxInterface && member == sandboxd1.MethodOpenSession:
		return cmp.Or(checkString(msg.Body, 0, "language", maxOptionName), checkExecOptions(msg.Body, 1))
	case iface == sandboxd1.SandboxInterface && member == sandboxd1.MethodEval:
		// The session's own bound, checked before anything is logged.
		return checkString(msg.Body, 1, "code", commands.MaxEvalInput)
	case iface == sandboxd1.SandboxInterface && (member == sandboxd1.MethodReadFile || member == sandboxd1.MethodListFiles ||
		member == sandboxd1.MethodWriteFile || member == sandboxd1.MethodReadFileTo || member == sandboxd1.MethodWriteFileFrom):
		return checkString(msg.Body, 0, "path", maxFilePath)
	case iface == sandboxd1.SandboxInterface && member == sandboxd1.MethodEditFile:
		return cmp.Or(checkString(msg.Body, 0, "path", maxFilePath), checkString(msg.Body, 1, "old", sandboxd1.MaxEditText),
			checkString(msg.Body, 2, "new", sandboxd1.MaxEditText))
	case iface == sandboxd1.ManagerInterface && member == "Try":
		return cmp.Or(checkArgv(msg.Body, 1, "variants"), checkString(msg.Body, 2, "check", MaxCheckBytes),
			checkString(msg.Body, 3, "keep", maxOptionName), checkExecOptions(msg.Body, 4), checkTryInputs(msg.Body, 4))
	}
	return ""
}

// maxFilePath bounds the file API's paths (PATH_MAX).
const maxFilePath = 4096

// checkString checks the length of the string at body[i], if there is one.
func checkString(body []any, i int, what string, limit int) string {
	if len(body) <= i {
		return ""
	}
	if s, ok := body[i].(string); ok && len(s) > limit {
		return fmt.Sprintf("%s holds %d bytes, more than the %d allowed", what, len(s), limit)
	}
	return ""
}

// checkExecOptions checks the sizes of an Exec's options at body[i], if
// there are any: their names, Environment and WorkingDirectory. Their
// types are options.Exec's to check (supervisor/api/options).
func checkExecOptions(body []any, i int) string {
	if len(body) <= i {
		return ""
	}
	opts, ok := body[i].(map[string]dbus.Variant)
	if !ok {
		return ""
	}
	for name := range opts {
		if len(name) > maxOptionName {
			return fmt.Sprintf("an option's name holds %d bytes, more than the %d allowed", len(name), maxOptionName)
		}
	}
	switch env := opts["Environment"].Value().(type) {
	case []string:
		if len(env) > MaxEnvEntries {
			return fmt.Sprintf("option Environment has %d entries, more than the %d allowed", len(env), MaxEnvEntries)
		}
		n := 0
		for _, e := range env {
			n += len(e) + 1
		}
		if n > MaxEnvBytes {
			return fmt.Sprintf("option Environment holds %d bytes, more than the %d allowed", n, MaxEnvBytes)
		}
	case string: // the wrong type, refused by options.Exec, but not at any size
		if len(env) > MaxEnvBytes {
			return fmt.Sprintf("option Environment holds %d bytes, more than the %d allowed", len(env), MaxEnvBytes)
		}
	}
	if dir, ok := opts["WorkingDirectory"].Value().(string); ok && len(dir) > MaxWorkingDirBytes {
		return fmt.Sprintf("option WorkingDirectory holds %d bytes, more than the %d allowed", len(dir), MaxWorkingDirBytes)
	}
	return ""
}

// checkArgv checks the list of strings at body[i], if there is one.
func checkArgv(body []any, i int, what string) string {
	if len(body) <= i {
		return ""
	}
	argv, ok := body[i].([]string)
	if !ok {
		return ""
	}
	if len(argv) > MaxArgs {
		return fmt.Sprintf("%s has %d entries, more than the %d allowed", what, len(argv), MaxArgs)
	}
	n := 0
	for _, a := range argv {
		n += len(a) + 1
	}
	if n > MaxArgvBytes {
		return fmt.Sprintf("%s holds %d bytes, more than the %d allowed", what, n, MaxArgvBytes)
	}
	return ""
}

// refuse rewrites msg into a call of the refusal object, which answers
// InvalidArgs with reason.
func refuse(msg *dbus.Message, reason string) { refuseAs(msg, "Refuse", reason) }

// refuseAs rewrites msg into a call of member of the refusal object.
func refuseAs(msg *dbus.Message, member, reason string) {
	msg.Headers[dbus.FieldPath] = dbus.MakeVariant(RefusePath)
	msg.Headers[dbus.FieldInterface] = dbus.MakeVariant(RefuseInterface)
	msg.Headers[dbus.FieldMember] = dbus.MakeVariant(member)
	msg.Headers[dbus.FieldSignature] = dbus.MakeVariant(dbus.SignatureOf(reason))
	delete(msg.Headers, dbus.FieldUnixFDs)
	msg.Body = []any{reason}
}

// Refuser answers the calls the guard refused.
type Refuser struct{}

func (Refuser) Refuse(sender dbus.Sender, reason string) *dbus.Error {
	logger().Warn("refused a D-Bus call", "BUS_SENDER", string(sender), "reason", reason)
	return dbus.NewError(sandboxd1.ErrorInvalidArgs, []any{reason})
}

// RefuseBusy answers an input for a session that takes no more now
// (sessionFull). Not logged: it is backpressure the caller hears, and a
// flood of them would use up journald's rate limit for the daemon.
func (Refuser) RefuseBusy(reason string) *dbus.Error {
	return dbus.NewError(sandboxd1.ErrorBusy, []any{reason})
}

func logger() *slog.Logger {
	if l := guardLog.Load(); l != nil {
		return l
	}
	return slog.Default()
}

// collectFDs returns the distinct descriptors anywhere in body: godbus
// turns an "h" into a UnixFD at any depth (in arrays, structs, variants
// and dicts).
func collectFDs(body []any) []int {
	seen := map[int]bool{}
	var fds []int
	var walk func(v reflect.Value)
	walk = func(v reflect.Value) {
		if !v.IsValid() {
			return
		}
		if v.Type() == reflect.TypeFor[dbus.UnixFD]() {
			if fd := int(v.Int()); fd >= 0 && !seen[fd] {
				seen[fd] = true
				fds = append(fds, fd)
			}
			return
		}
		if v.Type() == reflect.TypeFor[dbus.Variant]() {
			walk(reflect.ValueOf(v.Interface().(dbus.Variant).Value()))
			return
		}
		switch v.Kind() {
		case reflect.Interface, reflect.Pointer:
			walk(v.Elem())
		case reflect.Slice, reflect.Array:
			if v.Type().Elem().Kind() == reflect.String || v.Type().Elem().Kind() == reflect.Uint8 {
				return
			}
			for i := range v.Len() {
				walk(v.Index(i))
			}
		case reflect.Map:
			it := v.MapRange()
			for it.Next() {
				walk(it.Key())
				walk(it.Value())
			}
		case reflect.Struct:
			for i := range v.NumField() {
				if v.Type().Field(i).IsExported() {
					walk(v.Field(i))
				}
			}
		}
	}
	for _, b := range body {
		walk(reflect.ValueOf(b))
	}
	return fds
}

func closeReceived(fds []int) {
	for _, fd := range fds {
		_ = unix.Close(fd)
	}
}

// Sessions is what the guard asks of the interpreters' sessions: whether
// one takes no more inputs now (why, as an error), or nil.
type Sessions interface {
	SessionFull(sandbox, session string) error
}

// guardSessions are the sessions the guard asks about; Attach sets them.
var guardSessions atomic.Pointer[Sessions]

// sessionFull says, on the guard's reading goroutine, why an Eval must be
// refused at once because its session takes no more inputs now, or "".
// Refused there, the call's code is dropped as soon as it was read: the
// refusal waits for no bus round trip (who is calling) nor audit line,
// and the daemon reads no further call meanwhile.
func sessionFull(msg *dbus.Message, iface, member string) string {
	if iface != sandboxd1.SandboxInterface || member != sandboxd1.MethodEval || len(msg.Body) == 0 {
		return ""
	}
	sessions := guardSessions.Load()
	session, ok := msg.Body[0].(string)
	path, _ := msg.Headers[dbus.FieldPath].Value().(dbus.ObjectPath)
	id, found := strings.CutPrefix(string(path), string(sandboxd1.SandboxPathPrefix)+"/")
	if sessions == nil || *sessions == nil || !ok || !found {
		return ""
	}
	if err := (*sessions).SessionFull(id, session); err != nil {
		return termsafe.Line(err.Error())
	}
	return ""
}

// checkTryInputs bounds the Inputs option of a Try's options at body[i],
// if there are any, as its variants are: a sandbox each.
func checkTryInputs(body []any, i int) string {
	if len(body) <= i {
		return ""
	}
	opts, ok := body[i].(map[string]dbus.Variant)
	if !ok {
		return ""
	}
	if in, ok := opts[sandboxd1.OptInputs].Value().([]string); ok {
		return checkArgv([]any{in}, 0, "option Inputs")
	}
	return ""
}
