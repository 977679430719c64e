package config

import (
	"fmt"

	"github.com/sandboxd/sandboxd/sandboxd1"
)

// Size is a number of bytes. In a file it is an integer of bytes, or a
// string of an integer and a binary unit: "20GiB", "512M" (K = 1024). The
// text is read and written by sandboxd1.Size, which sandboxctl's flags
// use too: one spelling of sizes for the file and the command line.
type Size sandboxd1.Size

// Binary units.
const (
	KiB = Size(sandboxd1.KiB)
	MiB = Size(sandboxd1.MiB)
	GiB = Size(sandboxd1.GiB)
	TiB = Size(sandboxd1.TiB)
)

var errNotSize = sandboxd1.ErrNotSize

// String writes s in the largest unit that divides it exactly, or in bytes.
func (s Size) String() string { return sandboxd1.Size(s).String() }

// MarshalText writes s as String does, which UnmarshalText reads back.
func (s Size) MarshalText() ([]byte, error) { return sandboxd1.Size(s).MarshalText() }

// UnmarshalText reads "20GiB", "20G", "20 G" or "21474836480".
func (s *Size) UnmarshalText(text []byte) error { return (*sandboxd1.Size)(s).UnmarshalText(text) }

// UnmarshalTOML takes a TOML integer or string; for the decoder, which
// would otherwise turn a float or a boolean into text for UnmarshalText.
func (s *Size) UnmarshalTOML(v any) error {
	switch v := v.(type) {
	case int64:
		if v < 0 {
			return fmt.Errorf("%d is negative: %w", v, errNotSize)
		}
		*s = Size(v)
		return nil
	case string:
		return s.UnmarshalText([]byte(v))
	}
	return fmt.Errorf("%s is not a size: %w", tomlKind(v), errNotSize)
}

// tomlKind names the TOML type of a decoded value, for messages.
func tomlKind(v any) string {
	switch v := v.(type) {
	case float64:
		return fmt.Sprintf("the float %v", v)
	case bool:
		return fmt.Sprintf("the boolean %v", v)
	case map[string]any:
		return "a table"
	case []any, []map[string]any:
		return "an array"
	}
	return "a date or time"
}
