package client_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/sandboxd1"
)

// WireOptions are what Exec sends, for callers that make the call
// themselves (sandboxctl's exec and shell): each option set under its
// D-Bus name and type, none that is not set, and a timeout shorter than
// the bus's microsecond still a timeout.
func TestWireOptionsAreExecsOptionsOnTheBus(t *testing.T) {
	if got := (client.ExecOptions{}).WireOptions(); len(got) != 0 {
		t.Errorf("the zero ExecOptions on the bus: %v; want no options", got)
	}
	got := client.ExecOptions{Env: []string{"A=1"}, Dir: "/tmp", Root: true, Timeout: 500 * time.Nanosecond,
		OutputLimit: 10 * sandboxd1.MiB, Detach: true}.WireOptions()
	want := map[string]any{
		sandboxd1.OptEnvironment:      []string{"A=1"},
		sandboxd1.OptWorkingDirectory: "/tmp",
		sandboxd1.OptRoot:             true,
		sandboxd1.OptTimeoutUSec:      uint64(1),
		sandboxd1.OptOutputLimit:      uint64(10 << 20),
		sandboxd1.OptDetach:           true,
	}
	if len(got) != len(want) {
		t.Errorf("WireOptions: %v; want %v", got, want)
	}
	for name, w := range want {
		if v, ok := got[name]; !ok || !reflect.DeepEqual(v, dbus.MakeVariant(w)) {
			t.Errorf("WireOptions' %s: %v (present: %v); want %v", name, v, ok, dbus.MakeVariant(w))
		}
	}
}
