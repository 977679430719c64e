package mcpserver

import (
	"encoding/base64"
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"
)

// What a tool hands back of a command's output or a file: bounded, and
// always valid UTF-8, since a tool result is JSON text that a model reads.

// capture keeps the first and the last half of max bytes written to it,
// and counts all of them: an agent sees how a command started and how it
// ended (where a test run says what failed), and how much was cut between.
type capture struct {
	mu    sync.Mutex
	max   int
	head  []byte
	tail  []byte // the last bytes past head, at most max-len(head) once trimmed
	total int64
}

func newCapture(max int) *capture { return &capture{max: max} }

func (c *capture) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.total += int64(len(p))
	rest := p
	if room := c.max/2 - len(c.head); room > 0 {
		n := min(room, len(rest))
		c.head = append(c.head, rest[:n]...)
		rest = rest[n:]
	}
	if len(rest) == 0 {
		return len(p), nil
	}
	keep := c.max - c.max/2
	if len(rest) >= keep {
		c.tail = append(c.tail[:0], rest[len(rest)-keep:]...)
		return len(p), nil
	}
	c.tail = append(c.tail, rest...)
	// Trim only once tail holds twice what it keeps: appends stay cheap.
	if len(c.tail) > 2*keep {
		c.tail = append(c.tail[:0], c.tail[len(c.tail)-keep:]...)
	}
	return len(p), nil
}

// captured is what a capture kept, as text.
type captured struct {
	text   string
	total  int64 // bytes written
	cut    int64 // bytes left out between the head and the tail
	binary bool  // what was kept is not UTF-8 text
}

func (c *capture) result() captured {
	c.mu.Lock()
	defer c.mu.Unlock()
	keep := c.max - c.max/2
	tail := c.tail
	if len(tail) > keep {
		tail = tail[len(tail)-keep:]
	}
	cut := c.total - int64(len(c.head)) - int64(len(tail))
	if cut == 0 {
		text, binary := utf8Text(append(append([]byte{}, c.head...), tail...))
		return captured{text: text, total: c.total, binary: binary}
	}
	// A character cut in two at either edge of the gap is not binary:
	// those partial bytes go with the gap.
	head, tail := trimPartialEnd(c.head), trimPartialStart(tail)
	cut = c.total - int64(len(head)) - int64(len(tail))
	h, hb := utf8Text(head)
	t, tb := utf8Text(tail)
	return captured{
		text:   h + fmt.Sprintf("\n[... %d bytes cut here ...]\n", cut) + t,
		total:  c.total,
		cut:    cut,
		binary: hb || tb,
	}
}

// utf8Text is b as a string, its invalid bytes each replaced by U+FFFD;
// binary says whether there were any.
func utf8Text(b []byte) (text string, binary bool) {
	if utf8.Valid(b) {
		return string(b), false
	}
	return strings.ToValidUTF8(string(b), "\uFFFD"), true
}

// trimPartialEnd drops an incomplete UTF-8 sequence (up to 3 bytes) at
// the end of b.
func trimPartialEnd(b []byte) []byte {
	for i := 1; i <= 3 && i <= len(b); i++ {
		c := b[len(b)-i]
		if c < 0x80 {
			return b // ASCII: nothing partial after it
		}
		if utf8.RuneStart(c) {
			if !utf8.FullRune(b[len(b)-i:]) {
				return b[:len(b)-i]
			}
			return b
		}
	}
	return b
}

// trimPartialStart drops continuation bytes (up to 3) at the start of b:
// the rest of a character whose start was cut.
func trimPartialStart(b []byte) []byte {
	for i := 0; i < 3 && i < len(b); i++ {
		if utf8.RuneStart(b[i]) {
			return b[i:]
		}
	}
	return b[min(3, len(b)):]
}

// Encodings of file content in tool inputs and outputs.
const (
	encodingUTF8   = "utf-8"
	encodingBase64 = "base64"
)

// fileText is a file's bytes for a tool result: the text itself when it
// is text, base64 otherwise, with the encoding used.
func fileText(b []byte) (content, encoding string) {
	if isText(b) {
		return string(b), encodingUTF8
	}
	return base64.StdEncoding.EncodeToString(b), encodingBase64
}

// isText says whether b is text: UTF-8 without NUL or other C0 control
// bytes than tab, newline, carriage return, form feed, backspace and
// escape (terminal colours). An ELF can be valid UTF-8 and still be
// full of control bytes.
func isText(b []byte) bool {
	for _, c := range b {
		if c < 0x20 && c != '\t' && c != '\n' && c != '\r' && c != '\f' && c != '\b' && c != 0x1b {
			return false
		}
	}
	return utf8.Valid(b)
}

// decodeContent is a tool input's content as bytes.
func decodeContent(content, encoding string) ([]byte, error) {
	switch encoding {
	case "", encodingUTF8:
		return []byte(content), nil
	case encodingBase64:
		b, err := base64.StdEncoding.DecodeString(content)
		if err != nil {
			return nil, fmt.Errorf("content is not base64: %w", err)
		}
		return b, nil
	}
	return nil, fmt.Errorf("encoding %q is neither %q nor %q", encoding, encodingUTF8, encodingBase64)
}

// plural is n and word, with an s when n is not 1: "1 change", "2 changes".
func plural[N ~int | ~int64 | ~uint64](n N, word string) string {
	if n == 1 {
		return fmt.Sprintf("1 %s", word)
	}
	return fmt.Sprintf("%d %ss", n, word)
}

// writeSection writes text under a "--- name ---" heading, ending on a
// newline; nothing when text is "".
func writeSection(b *strings.Builder, name, text string) {
	if text == "" {
		return
	}
	b.WriteString("--- " + name + " ---\n" + text)
	if !strings.HasSuffix(text, "\n") {
		b.WriteString("\n")
	}
}

// writeNotes writes notes as a list under a "--- notes ---" heading;
// nothing when there are none.
func writeNotes(b *strings.Builder, notes []string) {
	if len(notes) == 0 {
		return
	}
	b.WriteString("--- notes ---\n")
	for _, n := range notes {
		b.WriteString("- " + n + "\n")
	}
}
