// Package randid makes the daemon's random ids: hex digits from the
// system's random source.
package randid

import (
	"crypto/rand"
	"encoding/hex"
	"strings"
)

// Hex is n random bytes as 2n hex digits.
func Hex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Sandbox is a new sandbox id: 12 hex digits, never all digits nor
// digits, an "e" and digits. Generic clients (the MCP inspector among
// them) parse an argument as JSON before they read its schema: such an
// id would reach the daemon as a number, as infinity ("12e834567890"),
// or as the prefix of another ("12e000000003" is 12).
func Sandbox() string {
	for {
		if id := Hex(6); !numberLike(id) {
			return id
		}
	}
}

// numberLike says whether a JSON parser takes hex digits s for a number.
func numberLike(s string) bool {
	mantissa, exponent, hasE := strings.Cut(s, "e")
	return allDigits(mantissa) && (!hasE || allDigits(exponent))
}

func allDigits(s string) bool {
	return s != "" && strings.Trim(s, "0123456789") == ""
}
