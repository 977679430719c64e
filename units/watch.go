package units

import (
	"context"
	"fmt"
	"path"
	"strconv"
	"strings"

	"github.com/godbus/dbus/v5"
)

// Event is a change of a watched unit.
type Event struct {
	Unit string
	// ActiveState and SubState are the unit's state after the change:
	// "active"/"running", "deactivating"/"stop-sigterm",
	// "failed"/"failed", "inactive"/"dead", ...
	ActiveState, SubState string
	// Result is the scope's result when systemd said it: "success",
	// "timeout" (RuntimeMax, or a stop that needed SIGKILL), "oom-kill",
	// "resources"; "" when not yet known.
	Result string
	// Gone: systemd let the unit go (its last process ended, or it was
	// stopped, or reset after failing). The name may then be started again.
	Gone bool
}

const (
	systemdBus      = "org.freedesktop.systemd1"
	systemdPath     = dbus.ObjectPath("/org/freedesktop/systemd1")
	unitPathPrefix  = "/org/freedesktop/systemd1/unit/"
	unitInterface   = "org.freedesktop.systemd1.Unit"
	scopeInterface  = "org.freedesktop.systemd1.Scope"
	managerIface    = "org.freedesktop.systemd1.Manager"
	propertiesIface = "org.freedesktop.DBus.Properties"
)

// Watch reports changes of the units whose names match pattern (a shell
// glob: "sandbox-*.scope") until ctx ends. It first sends the state of each
// matching unit loaded now, then every change of state, and Gone when
// systemd lets a unit go. Events are never dropped: they wait for the
// reader.
//
// The channel is closed when ctx ends, or when the bus connection is lost
// (ctx.Err() is nil then): watch again and compare with List.
//
// It listens to systemd's own signals (PropertiesChanged and UnitRemoved)
// on a connection of its own, in order, so it costs nothing while nothing
// changes. go-systemd's helpers do not fit: SubscribeUnits polls every
// unit, and its state and property subscribers are one per connection and
// drop updates when the reader falls behind.
func (m *Manager) Watch(ctx context.Context, pattern string) (<-chan Event, error) {
	op := fmt.Sprintf("watching units matching %q", pattern)
	if _, err := path.Match(pattern, ""); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	// The connection ends when ctx does. A sequential handler keeps
	// signals in the order systemd sent them (godbus's default handler
	// reorders when the reader is slow).
	conn, err := dbus.ConnectSystemBus(dbus.WithContext(ctx), dbus.WithSignalHandler(dbus.NewSequentialSignalHandler()))
	if err != nil {
		return nil, fmt.Errorf("%s: connecting to the system bus: %w", op, err)
	}
	signals := make(chan *dbus.Signal, 64)
	conn.Signal(signals)
	matches := [][]dbus.MatchOption{
		{dbus.WithMatchSender(systemdBus), dbus.WithMatchInterface(managerIface), dbus.WithMatchMember("UnitRemoved")},
		{dbus.WithMatchSender(systemdBus), dbus.WithMatchInterface(propertiesIface), dbus.WithMatchMember("PropertiesChanged"),
			dbus.WithMatchPathNamespace(dbus.ObjectPath(strings.TrimSuffix(unitPathPrefix, "/")))},
	}
	for _, match := range matches {
		if err := conn.AddMatchSignalContext(ctx, match...); err != nil {
			conn.Close()
			return nil, fmt.Errorf("%s: adding a signal match: %w", op, err)
		}
	}
	// systemd sends unit signals only while someone is subscribed; it
	// forgets this subscriber when the connection ends.
	if err := conn.Object(systemdBus, systemdPath).CallWithContext(ctx, managerIface+".Subscribe", 0).Err; err != nil {
		conn.Close()
		return nil, fmt.Errorf("%s: subscribing to systemd's signals: %w", op, err)
	}
	// Listed after subscribing, so nothing falls between the list and the
	// signals.
	now, err := m.List(ctx, pattern)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	events := make(chan Event, 16)
	w := &watcher{pattern: pattern, units: map[string]*seen{}, events: events}
	go func() {
		defer close(events)
		defer conn.Close()
		for _, u := range now {
			if !w.send(ctx, w.changed(u.Name, u.ActiveState, u.SubState, true)) {
				return
			}
		}
		for {
			select {
			case sig, ok := <-signals:
				if !ok {
					return
				}
				if !w.send(ctx, w.handle(sig)) {
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	return events, nil
}

// watcher turns systemd's signals into Events for the units that match.
type watcher struct {
	pattern string
	units   map[string]*seen
	events  chan<- Event
}

// seen is the last known state of a unit.
type seen struct {
	Event
	// sent: an Event of this unit went out. Only then does its Gone: asking
	// for an unknown unit's properties makes systemd load it, send
	// UnitRemoved, and forget it again.
	sent bool
}

// send delivers e, if any; false when ctx ended first.
func (w *watcher) send(ctx context.Context, e *Event) bool {
	if e == nil {
		return true
	}
	select {
	case w.events <- *e:
		return true
	case <-ctx.Done():
		return false
	}
}

// handle reads one signal; the Event to send, or nil.
func (w *watcher) handle(sig *dbus.Signal) *Event {
	switch sig.Name {
	case managerIface + ".UnitRemoved":
		var name string
		var p dbus.ObjectPath
		if dbus.Store(sig.Body, &name, &p) != nil {
			return nil
		}
		last, ok := w.units[name]
		if !ok {
			return nil
		}
		delete(w.units, name)
		if !last.sent {
			return nil
		}
		gone := last.Event
		gone.Gone = true
		return &gone
	case propertiesIface + ".PropertiesChanged":
		var iface string
		var changed map[string]dbus.Variant
		var invalidated []string
		if dbus.Store(sig.Body, &iface, &changed, &invalidated) != nil {
			return nil
		}
		name, ok := unitName(sig.Path)
		if !ok {
			return nil
		}
		if match, _ := path.Match(w.pattern, name); !match {
			return nil
		}
		str := func(prop string) string {
			s, _ := changed[prop].Value().(string)
			return s
		}
		switch iface {
		case scopeInterface:
			// systemd sends the scope's Result just before the unit's new
			// state: keep it for that Event.
			if r := str("Result"); r != "" {
				w.state(name).Result = r
			}
		case unitInterface:
			return w.changed(name, str("ActiveState"), str("SubState"), false)
		}
	}
	return nil
}

// state is what is known of name, empty at first.
func (w *watcher) state(name string) *seen {
	u, ok := w.units[name]
	if !ok {
		u = &seen{Event: Event{Unit: name}}
		w.units[name] = u
	}
	return u
}

// changed records a unit's new state ("" for what did not change) and
// returns the Event to send, or nil when there is nothing new to say.
// listed: the state comes from List, not from a signal.
func (w *watcher) changed(name, active, sub string, listed bool) *Event {
	u := w.state(name)
	before := u.Event
	if active != "" {
		u.ActiveState = active
	}
	if sub != "" {
		u.SubState = sub
	}
	switch {
	case u.ActiveState == "":
		return nil
	case u.sent && u.ActiveState == before.ActiveState && u.SubState == before.SubState:
		return nil
	case !u.sent && !listed && u.ActiveState == "inactive":
		// A unit being loaded (a scope about to start, or one only asked
		// about) says inactive first: nothing happened to it yet.
		return nil
	}
	u.sent = true
	e := u.Event
	return &e
}

// unitName is the unit a systemd object path stands for: the last element,
// with systemd's bus escaping ("_2d" for "-") undone.
func unitName(p dbus.ObjectPath) (string, bool) {
	escaped, ok := strings.CutPrefix(string(p), unitPathPrefix)
	if !ok || strings.Contains(escaped, "/") {
		return "", false
	}
	var b strings.Builder
	for i := 0; i < len(escaped); i++ {
		if escaped[i] == '_' && i+2 < len(escaped) {
			if c, err := strconv.ParseUint(escaped[i+1:i+3], 16, 8); err == nil {
				b.WriteByte(byte(c))
				i += 2
				continue
			}
		}
		b.WriteByte(escaped[i])
	}
	return b.String(), true
}
