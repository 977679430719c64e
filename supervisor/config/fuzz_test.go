package config

import (
	"errors"
	"strings"
	"testing"
)

// FuzzParse: no input makes Parse panic; what it accepts is valid; what it
// refuses, it refuses with ErrInvalid and errors that name the file and a
// line within it.
func FuzzParse(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data, "f.toml")
		if err == nil {
			if err := c.Validate(); err != nil {
				t.Fatalf("Parse accepted a config that Validate refuses: %v", err)
			}
			return
		}
		if !errors.Is(err, ErrInvalid) {
			t.Fatalf("%v: does not wrap ErrInvalid", err)
		}
		errs := []error{err}
		if _, one := err.(*Error); !one {
			errs = err.(interface{ Unwrap() []error }).Unwrap() // errors.Join
		}
		lines := strings.Count(string(data), "\n") + 1
		for _, err := range errs {
			var e *Error
			if !errors.As(err, &e) || e.File != "f.toml" || e.Line < 1 || e.Line > lines+1 {
				t.Fatalf("%v: want an *Error in f.toml at a line from 1 to %d", err, lines+1)
			}
		}
	})
}
