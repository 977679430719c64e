package options

import (
	"strings"
	"testing"

	"github.com/godbus/dbus/v5"
)

// Fork's options: each taken as typed; a count out of 1..16, a value of
// the wrong type and an unknown option are refused by name.
func TestUnitForkOptions(t *testing.T) {
	o, err := Fork(map[string]dbus.Variant{
		"Count": dbus.MakeVariant(uint32(3)), "Names": dbus.MakeVariant([]string{"a", "", "c"}),
		"Spawn": dbus.MakeVariant([][]string{{"sleep", "9"}}),
	})
	if err != nil || o.Count != 3 || len(o.Names) != 3 || o.Names[2] != "c" || len(o.Spawn) != 1 || o.Spawn[0][1] != "9" {
		t.Fatalf("Fork: %+v, %v", o, err)
	}
	for _, c := range []struct {
		opts  map[string]dbus.Variant
		words string
	}{
		{map[string]dbus.Variant{"Count": dbus.MakeVariant(uint32(0))}, "option Count (u): 0: make 1 to 16 forks at once"},
		{map[string]dbus.Variant{"Count": dbus.MakeVariant(uint32(17))}, "option Count (u): 17: make 1 to 16 forks at once"},
		{map[string]dbus.Variant{"Count": dbus.MakeVariant("3")}, "option Count (s)"},
		{map[string]dbus.Variant{"Names": dbus.MakeVariant("a")}, "option Names (s)"},
		{map[string]dbus.Variant{"Spawn": dbus.MakeVariant([]string{"sleep"})}, "option Spawn (as)"},
		{map[string]dbus.Variant{"Memory": dbus.MakeVariant(uint64(1))}, "option Memory (t): not an option of Fork (Count, Names, Spawn)"},
	} {
		if _, err := Fork(c.opts); err == nil || !strings.Contains(err.Error(), c.words) {
			t.Errorf("Fork(%v): %v; want an error saying %q", c.opts, err, c.words)
		}
	}
}
