package randid

import (
	"encoding/json"
	"testing"
)

// An id a generic client parses as JSON must stay a string.
func TestASandboxIDIsNeverANumber(t *testing.T) {
	for _, c := range []struct {
		id   string
		like bool
	}{
		{"123456789012", true}, {"12e834567890", true}, {"0e0000000000", true}, {"12e000000003", true},
		{"e12345678901", false}, {"12345678901e", false}, {"12e4e5678901", false}, {"1a3456789012", false},
	} {
		if got := numberLike(c.id); got != c.like {
			t.Errorf("numberLike(%q) = %v; want %v", c.id, got, c.like)
		}
		// What a JSON parser makes of it: a number (or, for 12e834567890,
		// a number out of range: an error that names it so).
		var v any
		err := json.Unmarshal([]byte(c.id), &v)
		_, isNumber := v.(float64)
		if rangeErr := err != nil && c.id == "12e834567890"; (isNumber || rangeErr) != c.like {
			t.Errorf("%q parsed as JSON: %v, %v; numberLike says %v", c.id, v, err, c.like)
		}
	}
	for range 100000 {
		if id := Sandbox(); numberLike(id) || len(id) != 12 {
			t.Fatalf("Sandbox() = %q", id)
		}
	}
}
