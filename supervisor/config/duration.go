package config

import (
	"errors"
	"fmt"
	"time"
)

// Duration is a length of time written as Go writes durations ("90s",
// "24h", "1h30m"); "0" means none.
type Duration time.Duration

var errNotDuration = errors.New(`want a duration like "30m" or "24h"`)

func (d Duration) String() string { return time.Duration(d).String() }

// MarshalText writes the duration back in the same form.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText reads "24h", "90m", "0"; a negative duration is refused.
func (d *Duration) UnmarshalText(text []byte) error {
	v, err := time.ParseDuration(string(text))
	if err != nil {
		return fmt.Errorf("%q: %w", text, errNotDuration)
	}
	if v < 0 {
		return fmt.Errorf("%q is negative: %w", text, errNotDuration)
	}
	*d = Duration(v)
	return nil
}

// UnmarshalTOML takes only strings: a bare number would leave its unit to
// guess.
func (d *Duration) UnmarshalTOML(v any) error {
	s, ok := v.(string)
	if !ok {
		return fmt.Errorf("%s is not a duration: %w", tomlKind(v), errNotDuration)
	}
	return d.UnmarshalText([]byte(s))
}
