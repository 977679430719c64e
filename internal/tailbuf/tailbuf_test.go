package tailbuf

import "testing"

// A command's captured output keeps its end, says how much was cut,
// and is valid UTF-8.
func TestUnitTailBuffer(t *testing.T) {
	b := &Buffer{Max: 4}
	_, _ = b.Write([]byte("abc"))
	if b.String() != "abc" {
		t.Errorf("under the bound: %q", b.String())
	}
	_, _ = b.Write([]byte("defg"))
	if got := b.String(); got != "[... the first 3 bytes are cut ...]\ndefg" {
		t.Errorf("over the bound: %q", got)
	}
	b = &Buffer{Max: 3}
	_, _ = b.Write([]byte("x\xffé"))
	if got := b.String(); got != "[... the first 1 bytes are cut ...]\n?é" {
		t.Errorf("invalid UTF-8: %q", got)
	}
}
