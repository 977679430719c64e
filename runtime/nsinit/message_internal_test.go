package nsinit

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

// An error of any length (a long path, a long program name) reaches the
// daemon as an error, not as "the init is not running": its reply fits
// the buffer the daemon reads it into.
func TestErrorRepliesFitTheDaemonsBuffer(t *testing.T) {
	for _, text := range []string{
		strings.Repeat("x", 10_000),
		strings.Repeat("\x01", 10_000), // six bytes each in JSON
		strings.Repeat("é", 5_000),
	} {
		m := errorMessage(errors.New(text))
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) > smallMessage {
			t.Errorf("a reply of %d bytes; the daemon reads at most %d", len(b), smallMessage)
		}
		if !utf8.ValidString(m.Error) || !strings.HasSuffix(m.Error, "... (cut)") {
			t.Errorf("cut error %q...: want valid UTF-8 ending in the mark", m.Error[:20])
		}
	}
	if m := errorMessage(errors.New("short")); m.Error != "short" {
		t.Errorf("a short error became %q", m.Error)
	}
}
