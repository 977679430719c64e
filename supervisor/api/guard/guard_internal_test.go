package guard

import (
	"strings"
	"testing"

	"github.com/godbus/dbus/v5"

	"github.com/sandboxd/sandboxd/sandboxd1"
)

// methodCall is a call of iface.member on path with body, as the guard
// sees it once read.
func methodCall(path dbus.ObjectPath, iface, member string, body ...any) *dbus.Message {
	return &dbus.Message{
		Type: dbus.TypeMethodCall,
		Headers: map[dbus.HeaderField]dbus.Variant{
			dbus.FieldPath:      dbus.MakeVariant(path),
			dbus.FieldInterface: dbus.MakeVariant(iface),
			dbus.FieldMember:    dbus.MakeVariant(member),
			dbus.FieldSignature: dbus.MakeVariant(dbus.SignatureOf(body...)),
		},
		Body: body,
	}
}

// Try's check and an Exec's Environment, WorkingDirectory and option
// names are bounded as the message is read: a call over a limit becomes a
// call of the refusal object, naming the argument and the limit, and
// reaches no handler (so no audit line); one at the limit goes through.
func TestGuardBoundsTryCheckAndExecOptions(t *testing.T) {
	sandbox := sandboxd1.SandboxPathPrefix + "/abc"
	try := func(check, keep string) *dbus.Message {
		return methodCall("/org/sandboxd1", sandboxd1.ManagerInterface, "Try",
			"web", []string{"true"}, check, keep, map[string]dbus.Variant{})
	}
	execWith := func(member string, opts map[string]dbus.Variant) *dbus.Message {
		if member == "ExecTerminal" {
			return methodCall(sandbox, sandboxd1.SandboxInterface, member, []string{"true"}, opts, uint16(24), uint16(80))
		}
		// Exec's descriptors are left out: the guard checks sizes of calls
		// that carry none the same way.
		return methodCall(sandbox, sandboxd1.SandboxInterface, member, []string{"true"}, opts, dbus.UnixFD(-1), dbus.UnixFD(-1), dbus.UnixFD(-1))
	}
	env := func(n, size int) map[string]dbus.Variant {
		list := make([]string, n)
		for i := range list {
			list[i] = "A=" + strings.Repeat("x", max(size/n-3, 0))
		}
		return map[string]dbus.Variant{"Environment": dbus.MakeVariant(list)}
	}
	dir := func(n int) map[string]dbus.Variant {
		return map[string]dbus.Variant{"WorkingDirectory": dbus.MakeVariant("/" + strings.Repeat("d", n-1))}
	}
	for _, c := range []struct {
		name string
		msg  *dbus.Message
		want string // "" for let through
	}{
		{"a check at the limit", try(strings.Repeat("c", MaxCheckBytes), "winner"), ""},
		{"a check over the limit", try(strings.Repeat("c", MaxCheckBytes+1), "winner"),
			"Try: check holds 65537 bytes, more than the 65536 allowed"},
		{"a long keep", try("true", strings.Repeat("k", 1000)), "Try: keep holds 1000 bytes, more than the 64 allowed"},
		{"1024 variables", execWith("Exec", env(MaxEnvEntries, 64<<10)), ""},
		{"1025 variables", execWith("Exec", env(MaxEnvEntries+1, 64<<10)),
			"Exec: option Environment has 1025 entries, more than the 1024 allowed"},
		{"200 KiB of variables", execWith("ExecTerminal", env(10, 200<<10)),
			"ExecTerminal: option Environment holds 204800 bytes, more than the 131072 allowed"},
		{"Environment as one huge string", execWith("Exec", map[string]dbus.Variant{"Environment": dbus.MakeVariant(strings.Repeat("e", 200<<10))}),
			"option Environment holds 204800 bytes, more than the 131072 allowed"},
		{"a working directory of 4096 bytes", execWith("Exec", dir(MaxWorkingDirBytes)), ""},
		{"a working directory of 4097 bytes", execWith("ExecTerminal", dir(MaxWorkingDirBytes+1)),
			"ExecTerminal: option WorkingDirectory holds 4097 bytes, more than the 4096 allowed"},
		{"a long option name", execWith("Exec", map[string]dbus.Variant{strings.Repeat("O", 1000): dbus.MakeVariant(true)}),
			"Exec: an option's name holds 1000 bytes, more than the 64 allowed"},
		// Spawn, OpenSession and Eval take the same bounds.
		{"a background process's 1025 variables", methodCall(sandbox, sandboxd1.SandboxInterface, sandboxd1.MethodSpawn,
			[]string{"true"}, env(MaxEnvEntries+1, 64<<10)), "Spawn: option Environment has 1025 entries, more than the 1024 allowed"},
		{"a session's long language", methodCall(sandbox, sandboxd1.SandboxInterface, sandboxd1.MethodOpenSession,
			strings.Repeat("p", 1000), map[string]dbus.Variant{}), "OpenSession: language holds 1000 bytes, more than the 64 allowed"},
		{"an input at the limit", methodCall(sandbox, sandboxd1.SandboxInterface, sandboxd1.MethodEval, "s1", strings.Repeat("x", 1<<20)), ""},
		{"an input over the limit", methodCall(sandbox, sandboxd1.SandboxInterface, sandboxd1.MethodEval, "s1", strings.Repeat("x", 1<<20+1)),
			"Eval: code holds 1048577 bytes, more than the 1048576 allowed"},
	} {
		guard(c.msg)
		member, _ := c.msg.Headers[dbus.FieldMember].Value().(string)
		switch {
		case c.want == "" && member == "Refuse":
			t.Errorf("%s: refused: %v", c.name, c.msg.Body)
		case c.want == "":
		case member != "Refuse":
			t.Errorf("%s: let through to %s; want a refusal saying %q", c.name, member, c.want)
		case len(c.msg.Body) != 1 || !strings.Contains(c.msg.Body[0].(string), c.want):
			t.Errorf("%s: refused saying %v; want %q", c.name, c.msg.Body, c.want)
		case c.msg.Headers[dbus.FieldPath].Value() != RefusePath:
			t.Errorf("%s: refused, but still on %v", c.name, c.msg.Headers[dbus.FieldPath].Value())
		}
	}
}
