package api

import (
	"context"
	"encoding/json"
	"slices"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/sandboxd/sandboxd/sandboxd1"
	"github.com/sandboxd/sandboxd/supervisor"
	"github.com/sandboxd/sandboxd/supervisor/api/introspection"
	"github.com/sandboxd/sandboxd/supervisor/state"
	"github.com/sandboxd/sandboxd/units"
)

// The handlers below serve the whole subtree under sandboxd1.SandboxPathPrefix: godbus
// hands them the message, whose path names the sandbox. That is also why
// properties are not godbus's prop.Properties: its Get and GetAll are not
// told who asks, and a caller may read only the sandboxes it may see.

// sandboxObject implements org.sandboxd1.Sandbox.
type sandboxObject struct{ s *Server }

// Destroy() destroys the sandbox, as DestroySandbox does.
func (o sandboxObject) Destroy(sender dbus.Sender, msg dbus.Message) *dbus.Error {
	s := o.s
	r, derr := s.begin(sender, "Destroy")
	if derr != nil {
		return derr
	}
	id, derr := objectID(msg)
	if derr != nil {
		return s.end(r, "", derr)
	}
	return s.end(r, id, s.destroy(r, id))
}

// Freeze() stops every process of the sandbox until Thaw().
func (o sandboxObject) Freeze(sender dbus.Sender, msg dbus.Message) *dbus.Error {
	return o.change(sender, msg, "Freeze", o.s.sup.Freeze)
}

// Thaw() lets a frozen sandbox's processes run again.
func (o sandboxObject) Thaw(sender dbus.Sender, msg dbus.Message) *dbus.Error {
	return o.change(sender, msg, "Thaw", o.s.sup.Thaw)
}

// Stop() ends the sandbox's processes and keeps it, stopped, until
// Start() runs it again (a booted one boots, declared processes are
// spawned again). Each does nothing to a sandbox already so.
func (o sandboxObject) Stop(sender dbus.Sender, msg dbus.Message) *dbus.Error {
	return o.change(sender, msg, sandboxd1.MethodStop, o.s.sup.Stop)
}

func (o sandboxObject) Start(sender dbus.Sender, msg dbus.Message) *dbus.Error {
	return o.change(sender, msg, sandboxd1.MethodStart, o.s.sup.Start)
}

// change runs a state change of the sandbox msg is sent to, for a caller
// that may see it, and announces the new state.
func (o sandboxObject) change(sender dbus.Sender, msg dbus.Message, action string,
	fn func(context.Context, string) (supervisor.Sandbox, error)) *dbus.Error {
	return o.onSandbox(sender, msg, action, func(ctx context.Context, id string) error {
		if _, err := fn(ctx, id); err != nil {
			return err
		}
		if err := o.s.SandboxChanged(ctx, id); err != nil {
			o.s.log.Error("announcing a state change", "SANDBOX_ID", id, "error", err)
		}
		return nil
	})
}

// sandboxProperties implements org.freedesktop.DBus.Properties.
type sandboxProperties struct{ s *Server }

func (p sandboxProperties) Get(sender dbus.Sender, msg dbus.Message, iface, name string) (dbus.Variant, *dbus.Error) {
	var live supervisor.Live
	switch name {
	case "Staleness":
		live = supervisor.LiveStaleness
	case "Usage":
		live = supervisor.LiveUsage
	}
	props, r, id, derr := p.s.properties(sender, msg, "Properties.Get", iface, live)
	if derr != nil {
		return dbus.Variant{}, derr
	}
	v, ok := props[name]
	if !ok {
		return dbus.Variant{}, p.s.end(r, id, dbusError(sandboxd1.ErrorUnknownProperty, "%s has no property %q", sandboxd1.SandboxInterface, name))
	}
	return v, p.s.end(r, id, nil)
}

func (p sandboxProperties) GetAll(sender dbus.Sender, msg dbus.Message, iface string) (map[string]dbus.Variant, *dbus.Error) {
	props, r, id, derr := p.s.properties(sender, msg, "Properties.GetAll", iface, supervisor.LiveAll)
	if derr != nil {
		return nil, derr
	}
	return props, p.s.end(r, id, nil)
}

// Set: every property is read-only; they change with the sandbox.
func (p sandboxProperties) Set(sender dbus.Sender, msg dbus.Message, iface, name string, _ dbus.Variant) *dbus.Error {
	props, r, id, derr := p.s.properties(sender, msg, "Properties.Set", iface, 0)
	if derr != nil {
		return derr
	}
	if _, ok := props[name]; !ok {
		return p.s.end(r, id, dbusError(sandboxd1.ErrorUnknownProperty, "%s has no property %q", sandboxd1.SandboxInterface, name))
	}
	return p.s.end(r, id, dbusError(sandboxd1.ErrorPropertyReadOnly, "property %s of sandbox %s is read-only", name, id))
}

// properties reads the properties of the sandbox msg is sent to; live
// says which of Staleness and Usage are wanted (Staleness costs a
// snapshot and a change list, Usage a systemd call and filesystem reads;
// the others nothing). On success the call stays open: the caller ends it.
func (s *Server) properties(sender dbus.Sender, msg dbus.Message, action, iface string, live supervisor.Live) (map[string]dbus.Variant, *request, string, *dbus.Error) {
	r, derr := s.begin(sender, action)
	if derr != nil {
		return nil, nil, "", derr
	}
	id, derr := objectID(msg)
	if derr != nil {
		return nil, nil, "", s.end(r, "", derr)
	}
	// The empty name means "whichever interface has it" (D-Bus spec).
	if iface != sandboxd1.SandboxInterface && iface != "" {
		return nil, nil, "", s.end(r, id, dbusError(sandboxd1.ErrorUnknownInterface, "sandbox %s has no properties of interface %q", id, iface))
	}
	sb, derr := s.lookup(r, id)
	if derr != nil {
		return nil, nil, "", s.end(r, id, derr)
	}
	var insp supervisor.Inspection
	if live != 0 {
		var err error
		if insp, err = s.sup.Inspect(r.ctx, id, live); err != nil {
			return nil, nil, "", s.end(r, id, fromSupervisor(err))
		}
	}
	props, err := sandboxProps(sb, insp)
	if err != nil {
		return nil, nil, "", s.end(r, id, dbusError(sandboxd1.ErrorFailed, "reading the properties of sandbox %s: %v", id, err))
	}
	return props, r, id, nil
}

// sandboxProps are the org.sandboxd1.Sandbox properties of sb.
func sandboxProps(sb supervisor.Sandbox, insp supervisor.Inspection) (map[string]dbus.Variant, error) {
	limits, err := limitsMap(sb.Limits)
	if err != nil {
		return nil, err
	}
	if sb.DiskQuota > 0 {
		limits["DiskQuota"] = dbus.MakeVariant(sb.DiskQuota)
	}
	allow := sb.Allow
	if allow == nil {
		allow = []string{}
	}
	var expires uint64
	if !sb.Expires.IsZero() {
		expires = micros(sb.Expires)
	}
	return map[string]dbus.Variant{
		"Id":              dbus.MakeVariant(sb.ID),
		"Name":            dbus.MakeVariant(sb.Name),
		"Project":         dbus.MakeVariant(sb.Project),
		"State":           dbus.MakeVariant(string(sb.State)),
		"Owner":           dbus.MakeVariant(sb.Owner),
		"Created":         dbus.MakeVariant(micros(sb.Created)),
		"Expires":         dbus.MakeVariant(expires),
		"Path":            dbus.MakeVariant(sb.Path),
		"Unit":            dbus.MakeVariant(sb.Unit),
		"Base":            dbus.MakeVariant(sb.Base),
		"Profile":         dbus.MakeVariant(sb.Profile),
		"Limits":          dbus.MakeVariant(limits),
		"Network":         dbus.MakeVariant(sb.Network),
		"Boot":            dbus.MakeVariant(sb.Boot),
		"Allow":           dbus.MakeVariant(allow),
		"ReadOnlyProject": dbus.MakeVariant(sb.ReadOnlyProject),
		"HostIDs":         dbus.MakeVariant(hostIDs(sb.IDs)),
		"FrozenIdle":      dbus.MakeVariant(sb.FrozenIdle),
		// Live: read at each Get, never announced by PropertiesChanged.
		"Staleness": dbus.MakeVariant(insp.Staleness),
		"Usage":     dbus.MakeVariant(usageMap(insp)),
	}, nil
}

// usageMap is a sandbox's live usage, with only what the host accounts:
// MemoryCurrent, MemoryPeak and DiskUsed in bytes, CPUUsageNSec,
// TasksCurrent.
func usageMap(in supervisor.Inspection) map[string]dbus.Variant {
	out := map[string]dbus.Variant{}
	for name, a := range map[string]units.Amount{
		"MemoryCurrent": in.Memory, "MemoryPeak": in.MemoryPeak, "CPUUsageNSec": in.CPU, "TasksCurrent": in.Tasks,
		"DiskUsed": in.Disk,
	} {
		if a.Known {
			out[name] = dbus.MakeVariant(a.Value)
		}
	}
	return out
}

// limitsMap is a sandbox's recorded limits under CreateSandbox's option
// names, with only the limits that are set.
func limitsMap(raw json.RawMessage) (map[string]dbus.Variant, error) {
	out := map[string]dbus.Variant{}
	if len(raw) == 0 {
		return out, nil
	}
	var l units.Limits
	if err := json.Unmarshal(raw, &l); err != nil {
		return nil, err
	}
	for name, v := range map[string]*uint64{
		"MemoryMax": l.MemoryMax, "MemoryHigh": l.MemoryHigh, "MemorySwapMax": l.MemorySwapMax,
		"TasksMax": l.TasksMax, "CPUWeight": l.CPUWeight, "IOWeight": l.IOWeight,
	} {
		if v != nil {
			out[name] = dbus.MakeVariant(*v)
		}
	}
	for name, d := range map[string]*time.Duration{"CPUQuotaPerSecUSec": l.CPUQuota, "RuntimeMaxUSec": l.RuntimeMax} {
		if d != nil {
			out[name] = dbus.MakeVariant(uint64(d.Microseconds()))
		}
	}
	return out, nil
}

// sandboxIntrospectable implements org.freedesktop.DBus.Introspectable
// for the sandboxes and the node above them.
type sandboxIntrospectable struct{ s *Server }

func (i sandboxIntrospectable) Introspect(sender dbus.Sender, msg dbus.Message) (string, *dbus.Error) {
	s := i.s
	r, derr := s.begin(sender, "Introspect")
	if derr != nil {
		return "", derr
	}
	if path, _ := msg.Headers[dbus.FieldPath].Value().(dbus.ObjectPath); path == sandboxd1.SandboxPathPrefix {
		list, err := s.sup.List(r.ctx)
		if err != nil {
			return "", s.end(r, "", dbusError(sandboxd1.ErrorFailed, "listing sandboxes: %v", err))
		}
		var ids []string
		for _, sb := range list {
			if r.who.Sees(sb.Owner) && sandboxd1.ValidID(sb.ID) {
				ids = append(ids, sb.ID)
			}
		}
		slices.Sort(ids)
		return introspection.Sandboxes(ids), s.end(r, "", nil)
	}
	id, derr := objectID(msg)
	if derr != nil {
		return "", s.end(r, "", derr)
	}
	if _, derr := s.lookup(r, id); derr != nil {
		return "", s.end(r, id, derr)
	}
	return introspection.SandboxXML, s.end(r, id, nil)
}

// objectID is the id of the sandbox msg is sent to.
func objectID(msg dbus.Message) (string, *dbus.Error) {
	path, _ := msg.Headers[dbus.FieldPath].Value().(dbus.ObjectPath)
	id, ok := sandboxd1.IDFromPath(path)
	if !ok {
		return "", dbusError(sandboxd1.ErrorUnknownObject, "no sandbox object at %s", path)
	}
	return id, nil
}

// micros is t in µs since the Unix epoch, as systemd gives times.
func micros(t time.Time) uint64 {
	if t.Before(time.Unix(0, 0)) {
		return 0
	}
	return uint64(t.UnixMicro())
}

// hostIDs is the HostIDs property: the first and last host id of the
// sandbox's user namespace, none without one.
func hostIDs(m *state.IDMap) []uint32 {
	if m == nil {
		return []uint32{}
	}
	return []uint32{m.Base, m.Base + supervisor.IDBlock - 1}
}
