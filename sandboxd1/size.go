package sandboxd1

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Size is a number of bytes, written as an integer of bytes or an integer
// and a binary unit: "20GiB", "512M" (K = 1024). The options that take
// bytes (MemoryMax, DiskQuota, OutputLimit) take the number; sandboxctl's
// flags and sandboxd.toml take the text.
type Size uint64

// Binary units.
const (
	KiB Size = 1 << (10 * (iota + 1))
	MiB
	GiB
	TiB
)

var sizeUnits = []struct {
	size  Size
	names []string // the first is how String writes it
}{
	{TiB, []string{"TiB", "T"}},
	{GiB, []string{"GiB", "G"}},
	{MiB, []string{"MiB", "M"}},
	{KiB, []string{"KiB", "K"}},
}

// ErrNotSize is wrapped by every error of reading a size; its text says
// what a size is.
var ErrNotSize = errors.New(`want an integer of bytes, or an integer and a unit K, M, G or T ` +
	`(or KiB, MiB, GiB, TiB; K = 1024), like "20GiB"`)

// ParseSize reads "20GiB", "20G", "20 G" or "21474836480".
func ParseSize(text string) (Size, error) {
	var s Size
	err := s.UnmarshalText([]byte(text))
	return s, err
}

// String writes s in the largest unit that divides it exactly, or in bytes.
func (s Size) String() string {
	for _, u := range sizeUnits {
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
		return fmt.Errorf("%q is not a size: %w", str, ErrNotSize)
	}
	mul := Size(1)
	if unit != "" {
		mul = 0
		for _, u := range sizeUnits {
			for _, name := range u.names {
				if unit == name {
					mul = u.size
				}
			}
		}
		if mul == 0 {
			return fmt.Errorf("%q is not a size: unknown unit %q: %w", str, unit, ErrNotSize)
		}
	}
	if err != nil || n > math.MaxUint64/uint64(mul) {
		return fmt.Errorf("%q is too large: at most 16EiB: %w", str, ErrNotSize)
	}
	*s = Size(n) * mul
	return nil
}
