package mcpserver

import (
	"bytes"
	"strings"
	"testing"
)

func TestCaptureKeepsAllThatFits(t *testing.T) {
	c := newCapture(16)
	for _, p := range []string{"hello ", "wörld", "\n"} {
		c.Write([]byte(p))
	}
	r := c.result()
	if r.text != "hello wörld\n" || r.total != 13 || r.cut != 0 || r.binary {
		t.Errorf("result %+v; want the whole text, 13 bytes, nothing cut", r)
	}
}

func TestCaptureKeepsHeadAndTailAndCountsTheCut(t *testing.T) {
	c := newCapture(64)
	var all bytes.Buffer
	for i := range 1000 {
		line := []byte(strings.Repeat(string(rune('a'+i%26)), 7) + "\n")
		all.Write(line)
		c.Write(line)
	}
	r := c.result()
	want := all.Bytes()
	if r.total != int64(len(want)) {
		t.Fatalf("total %d; want %d", r.total, len(want))
	}
	head, tail, ok := strings.Cut(r.text, "\n[... ")
	if !ok || head != string(want[:32]) {
		t.Fatalf("head %q; want the first 32 bytes %q", head, want[:32])
	}
	if !strings.HasSuffix(tail, " bytes cut here ...]\n"+string(want[len(want)-32:])) {
		t.Errorf("tail %q; want the last 32 bytes %q after the mark", tail, want[len(want)-32:])
	}
	if r.cut != int64(len(want)-64) || !strings.Contains(r.text, "[... 7936 bytes cut here ...]") {
		t.Errorf("cut %d, text %q; want 7936 bytes cut and said", r.cut, r.text)
	}
}

// One large write is kept as many small ones are.
func TestCaptureOfOneLargeWrite(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789"), 100)
	c := newCapture(20)
	c.Write(data)
	r := c.result()
	if !strings.HasPrefix(r.text, "0123456789\n[... 980 bytes cut") || !strings.HasSuffix(r.text, "...]\n0123456789") {
		t.Errorf("text %q", r.text)
	}
}

// A character cut at either edge of the gap is dropped with the gap, not
// taken for binary; bytes that are not UTF-8 are, and are replaced.
func TestCaptureTextAndBinary(t *testing.T) {
	c := newCapture(8)
	c.Write([]byte("abc€€€€€€€€xyz")) // € is 3 bytes: the head is "abc" and 1 of €, the tail 1 of € and "xyz"
	r := c.result()
	if r.binary || r.text != "abc\n[... 24 bytes cut here ...]\nxyz" {
		t.Errorf("a cut inside characters: %+v", r)
	}
	c = newCapture(64)
	c.Write([]byte("ok\xff\xfe\x00end"))
	r = c.result()
	if !r.binary || r.text != "ok\uFFFD\x00end" {
		t.Errorf("binary output: %+v; want it marked binary, its invalid bytes replaced", r)
	}
}

func TestFileTextAndContent(t *testing.T) {
	if s, enc := fileText([]byte("é\n")); s != "é\n" || enc != encodingUTF8 {
		t.Errorf("text file: %q %s", s, enc)
	}
	bin := []byte{0x7f, 'E', 'L', 'F', 0xff, 0}
	s, enc := fileText(bin)
	if enc != encodingBase64 {
		t.Fatalf("binary file: encoding %s", enc)
	}
	back, err := decodeContent(s, enc)
	if err != nil || !bytes.Equal(back, bin) {
		t.Errorf("base64 round trip: %q, %v", back, err)
	}
	if _, err := decodeContent("!!", encodingBase64); err == nil {
		t.Error("content that is not base64 was taken")
	}
	if _, err := decodeContent("x", "latin-1"); err == nil || !strings.Contains(err.Error(), "latin-1") {
		t.Errorf("an unknown encoding: %v", err)
	}
}

func TestParseMode(t *testing.T) {
	for text, want := range map[string]string{"644": "-rw-r--r--", "0755": "-rwxr-xr-x", "4755": "urwxr-xr-x"} {
		m, err := parseMode(text)
		if err != nil || m.String() != want {
			t.Errorf("mode %s: %v, %v; want %s", text, m, err, want)
		}
	}
	for _, bad := range []string{"", "9", "rw", "17777", "0"} {
		if _, err := parseMode(bad); err == nil {
			t.Errorf("mode %q was taken", bad)
		}
	}
}
