package config

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Size is a number of bytes. In a file it is an integer of bytes, or a
// string of an integer and a binary unit: "20GiB", "512M" (K = 1024).
type Size uint64

// Binary units.
const (
	KiB Size = 1 << (10 * (iota + 1))
	MiB
	GiB
	TiB
)

var units = []struct {
	size  Size
	names []string // the first is how String writes it
}{
	{TiB, []string{"TiB", "T"}},
	{GiB, []string{"GiB", "G"}},
	{MiB, []string{"MiB", "M"}},
	{KiB, []string{"KiB", "K"}},
}

const sizeForm = `want an integer of bytes, or an integer and a unit K, M, G or T ` +
	`(or KiB, MiB, GiB, TiB; K = 1024), like "20GiB"`

var errNotSize = errors.New(sizeForm)

// String writes s in the largest unit that divides it exactly, or in bytes.
func (s Size) String() string {
	for _, u := range units {
		if s >= u.size && s%u.size == 0 {
			return strconv.FormatUint(uint64(s/u.size), 10) + u.names[0]
		}
	}
	return strconv.FormatUint(uint64(s), 10)
}

// MarshalText writes s as String does, which UnmarshalText reads back.
func (s Size) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText reads "20GiB", "20G", "20 G" or "21474836480".
func (s *Size) UnmarshalText(text []byte) error {
	str := string(text)
	digits := strings.TrimLeft(str, "0123456789")
	num, unit := str[:len(str)-len(digits)], strings.TrimSpace(digits)
	n, err := strconv.ParseUint(num, 10, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return fmt.Errorf("%q is not a size: %w", str, errNotSize)
	}
	mul := Size(1)
	if unit != "" {
		mul = 0
		for _, u := range units {
			for _, name := range u.names {
				if unit == name {
					mul = u.size
				}
			}
		}
		if mul == 0 {
			return fmt.Errorf("%q is not a size: unknown unit %q: %w", str, unit, errNotSize)
		}
	}
	if err != nil || n > math.MaxUint64/uint64(mul) {
		return fmt.Errorf("%q is too large: at most 16EiB: %w", str, errNotSize)
	}
	*s = Size(n) * mul
	return nil
}

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
