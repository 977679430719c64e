package options

import (
	"testing"

	"github.com/godbus/dbus/v5"
)

// A unified diff (UnifiedDiff's, PromotionDiff's) is cut where the
// caller asks, and never later than maxUnifiedDiff: MaxBytes 0, which
// unidiff takes for no bound, is the default bound too.
func TestUnitUnifiedDiffOptionsBounded(t *testing.T) {
	for _, c := range []struct {
		opts map[string]dbus.Variant
		want int64
	}{
		{map[string]dbus.Variant{}, maxUnifiedDiff},
		{map[string]dbus.Variant{"MaxBytes": dbus.MakeVariant(uint64(1 << 20))}, 1 << 20},
		{map[string]dbus.Variant{"MaxBytes": dbus.MakeVariant(uint64(1 << 40))}, maxUnifiedDiff},
		{map[string]dbus.Variant{"MaxBytes": dbus.MakeVariant(uint64(0))}, maxUnifiedDiff},
	} {
		_, most, err := UnifiedDiff(c.opts)
		if err != nil || most != c.want {
			t.Errorf("options %v: MaxBytes %d, %v; want %d", c.opts, most, err, c.want)
		}
	}
}
