package options

import (
	"fmt"

	"github.com/godbus/dbus/v5"

	"github.com/sandboxd/sandboxd/supervisor"
)

// maxUnifiedDiff bounds a unified diff's answer, which is one D-Bus
// string (UnifiedDiff's, PromotionDiff's).
const maxUnifiedDiff = 32 << 20

// UnifiedDiff reads UnifiedDiff's and PromotionDiff's options, for
// unidiff.Options: Context (u) lines of context, MaxBytes (t) where the
// text is cut (at most maxUnifiedDiff, the default; 0 too: to unidiff it
// is no bound, and the daemon would hold a diff as large as the sandbox).
func UnifiedDiff(opts map[string]dbus.Variant) (lines int, maxBytes int64, err error) {
	maxBytes = maxUnifiedDiff
	for name, v := range opts {
		switch x := v.Value().(type) {
		case uint32:
			if name != "Context" {
				return 0, 0, fmt.Errorf("option %s: unknown, or not of type u (known: Context u, MaxBytes t): %w", name, supervisor.ErrInvalid)
			}
			lines = int(min(x, 1000))
		case uint64:
			if name != "MaxBytes" {
				return 0, 0, fmt.Errorf("option %s: unknown, or not of type t (known: Context u, MaxBytes t): %w", name, supervisor.ErrInvalid)
			}
			if x == 0 {
				x = maxUnifiedDiff
			}
			maxBytes = int64(min(x, maxUnifiedDiff))
		default:
			return 0, 0, fmt.Errorf("option %s: unknown, or of the wrong type (known: Context u, MaxBytes t): %w", name, supervisor.ErrInvalid)
		}
	}
	return lines, maxBytes, nil
}
