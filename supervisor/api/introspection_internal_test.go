package api

import (
	"encoding/xml"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/godbus/dbus/v5/introspect"
	"github.com/godbus/dbus/v5/prop"

	"github.com/sandboxd/sandboxd/sandboxd1"
	"github.com/sandboxd/sandboxd/supervisor"
	"github.com/sandboxd/sandboxd/supervisor/api/introspection"
	"github.com/sandboxd/sandboxd/supervisor/state"
)

// The XML says what the Go code does: every method with its signature,
// every property with its type. The signals' types are checked where they
// are received, on the bus, and what is served is compared there with the
// shipped files.

func parseNode(t *testing.T, text string) map[string]introspect.Interface {
	t.Helper()
	var n introspect.Node
	if err := xml.Unmarshal([]byte(text), &n); err != nil {
		t.Fatalf("the introspection XML does not parse: %v", err)
	}
	out := map[string]introspect.Interface{}
	for _, i := range n.Interfaces {
		if _, dup := out[i.Name]; dup {
			t.Fatalf("interface %s twice", i.Name)
		}
		out[i.Name] = i
	}
	return out
}

// signature of a method: "name(in types)->(out types)".
func signature(name string, args []introspect.Arg) string {
	var in, out []string
	for _, a := range args {
		if a.Direction == "out" {
			out = append(out, a.Type)
		} else {
			in = append(in, a.Type)
		}
	}
	return fmt.Sprintf("%s(%s)->(%s)", name, strings.Join(in, ","), strings.Join(out, ","))
}

func methodsOf(ms []introspect.Method) []string {
	var out []string
	for _, m := range ms {
		out = append(out, signature(m.Name, m.Args))
	}
	slices.Sort(out)
	return out
}

// signalsOf ignores the arguments' direction: a signal's are all "out",
// said or not.
func signalsOf(ss []introspect.Signal) []string {
	var out []string
	for _, s := range ss {
		var types []string
		for _, a := range s.Args {
			types = append(types, a.Type)
		}
		out = append(out, s.Name+"("+strings.Join(types, ",")+")")
	}
	slices.Sort(out)
	return out
}

func sameList(t *testing.T, what string, got, want []string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("%s:\n the XML says %v\n the code has %v", what, got, want)
	}
}

func TestTheXMLDescribesTheCode(t *testing.T) {
	mgr := parseNode(t, introspection.ManagerXML)
	sb := parseNode(t, introspection.SandboxXML)

	sameList(t, "org.sandboxd1.Manager methods", methodsOf(mgr[sandboxd1.ManagerInterface].Methods), methodsOf(introspect.Methods(manager{})))
	sameList(t, "org.sandboxd1.Sandbox methods", methodsOf(sb[sandboxd1.SandboxInterface].Methods), methodsOf(introspect.Methods(sandboxObject{})))
	sameList(t, "org.freedesktop.DBus.Properties methods", methodsOf(sb["org.freedesktop.DBus.Properties"].Methods), methodsOf(introspect.Methods(sandboxProperties{})))
	sameList(t, "org.freedesktop.DBus.Properties signals", signalsOf(sb["org.freedesktop.DBus.Properties"].Signals), signalsOf(prop.IntrospectData.Signals))
	for _, node := range []map[string]introspect.Interface{mgr, sb} {
		sameList(t, "org.freedesktop.DBus.Introspectable", methodsOf(node["org.freedesktop.DBus.Introspectable"].Methods), methodsOf(introspect.IntrospectData.Methods))
		sameList(t, "org.freedesktop.DBus.Peer", methodsOf(node["org.freedesktop.DBus.Peer"].Methods), methodsOf(introspect.PeerData.Methods))
	}

	// The properties, as sandboxProps makes them.
	props, err := sandboxProps(supervisor.Sandbox{Record: state.Record{ID: "x", State: state.Ready, Limits: []byte(`{"MemoryMax":1}`)}}, supervisor.Inspection{})
	if err != nil {
		t.Fatal(err)
	}
	var got, want []string
	for _, p := range sb[sandboxd1.SandboxInterface].Properties {
		got = append(got, p.Name+" "+p.Type+" "+p.Access)
	}
	for name, v := range props {
		want = append(want, name+" "+v.Signature().String()+" read")
	}
	slices.Sort(got)
	slices.Sort(want)
	sameList(t, "org.sandboxd1.Sandbox properties", got, want)
}
