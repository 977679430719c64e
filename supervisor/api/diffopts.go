package api

import (
	"fmt"

	"github.com/godbus/dbus/v5"

	"github.com/sandboxd/sandboxd/promote/unidiff"
	"github.com/sandboxd/sandboxd/supervisor"
)

// maxUnifiedDiff bounds a unified diff's answer, which is one D-Bus
// string (UnifiedDiff's, PromotionDiff's).
const maxUnifiedDiff = 32 << 20

// unifiedDiffOptions reads UnifiedDiff's and PromotionDiff's options:
// Context (u) lines of context, MaxBytes (t) where the text is cut (at
// most maxUnifiedDiff, the default; 0 too: to unidiff it is no bound,
// and the daemon would hold a diff as large as the sandbox).
func unifiedDiffOptions(opts map[string]dbus.Variant) (unidiff.Options, error) {
	uo := unidiff.Options{MaxBytes: maxUnifiedDiff}
	for name, v := range opts {
		switch x := v.Value().(type) {
		case uint32:
			if name != "Context" {
				return uo, fmt.Errorf("option %s: unknown, or not of type u (known: Context u, MaxBytes t): %w", name, supervisor.ErrInvalid)
			}
			uo.Context = int(min(x, 1000))
		case uint64:
			if name != "MaxBytes" {
				return uo, fmt.Errorf("option %s: unknown, or not of type t (known: Context u, MaxBytes t): %w", name, supervisor.ErrInvalid)
			}
			if x == 0 {
				x = maxUnifiedDiff
			}
			uo.MaxBytes = int64(min(x, maxUnifiedDiff))
		default:
			return uo, fmt.Errorf("option %s: unknown, or of the wrong type (known: Context u, MaxBytes t): %w", name, supervisor.ErrInvalid)
		}
	}
	return uo, nil
}
