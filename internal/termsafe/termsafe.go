// Package termsafe makes text that a sandbox shaped (file names, a
// check's output, error texts that carry them) safe to show on a
// terminal or write to a log: nothing in it can move the cursor, change
// the terminal's title, reorder what follows (bidi overrides), or start
// a line of its own that passes for sandboxctl's or the daemon's own.
//
// Every function leaves ordinary printable text (any language) as it is
// and escapes the rest:
//
//   - C0 controls and DEL: \a \b \t \n \v \f \r, else \xNN (\x1b);
//   - C1 controls (U+0080 to U+009F), Unicode format characters (bidi
//     embeddings, overrides and isolates U+202A-202E, U+2066-2069, marks,
//     zero-width characters, U+FEFF, ...) and the line and paragraph
//     separators U+2028/U+2029: \u202e;
//   - a byte that is not part of valid UTF-8: \xNN.
package termsafe

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// unsafe reports whether r, a decoded rune, would act on a terminal or
// spoof a line: a control (C0, DEL, C1), a format character (bidi
// controls, zero-width characters), or a line or paragraph separator.
func unsafe(r rune) bool {
	return r < 0x20 || r == 0x7f || (r >= 0x80 && r <= 0x9f) ||
		unicode.Is(unicode.Cf, r) || r == '\u2028' || r == '\u2029'
}

// escaper says how one kind of output writes what it escapes.
type escaper struct {
	backslash bool // double a backslash (the output can be read back unambiguously)
	keepTab   bool // a tab stays (prose); else it is \t (a table, a field)
	quote     bool // escape '"' too (inside git's double quotes)
	octal     bool // git's \NNN for every escaped byte instead of \xNN and \uNNNN
}

// needs reports whether s holds anything e would change.
func (e escaper) needs(s string) bool {
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			return true
		case r == '\\' && e.backslash, r == '"' && e.quote:
			return true
		case r == '\t' && e.keepTab:
		case unsafe(r):
			return true
		}
		i += n
	}
	return false
}

func (e escaper) escape(s string) string {
	if !e.needs(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			e.bytes(&b, s[i:i+1], true)
		case r == '\\' && e.backslash:
			b.WriteString(`\\`)
		case r == '"' && e.quote:
			b.WriteString(`\"`)
		case r == '\t' && e.keepTab:
			b.WriteRune(r)
		case unsafe(r):
			if named, ok := names[r]; ok {
				b.WriteString(named)
			} else {
				e.bytes(&b, s[i:i+n], false)
			}
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// names are C's escapes, which git and Go use too.
var names = map[rune]string{'\a': `\a`, '\b': `\b`, '\t': `\t`, '\n': `\n`, '\v': `\v`, '\f': `\f`, '\r': `\r`}

// bytes writes the escape of seq, one rune (or an invalid byte when
// invalid).
func (e escaper) bytes(b *strings.Builder, seq string, invalid bool) {
	switch r, _ := utf8.DecodeRuneInString(seq); {
	case e.octal:
		for i := 0; i < len(seq); i++ {
			fmt.Fprintf(b, `\%03o`, seq[i])
		}
	case invalid || r < 0x80:
		fmt.Fprintf(b, `\x%02x`, seq[0])
	default:
		fmt.Fprintf(b, `\u%04x`, r)
	}
}

var (
	line = escaper{backslash: true}
	text = escaper{keepTab: true}
	path = escaper{backslash: true, quote: true, octal: true}
)

// Line is s as one line of printable text, escaped so that it reads back
// unambiguously (a backslash is doubled): for a name or a line of output
// a sandbox made.
func Line(s string) string { return line.escape(s) }

// Text is s made safe as Line makes it, but with backslashes and tabs
// kept: for prose that quotes the names it carries already (Go's %q, a
// daemon that used Line), which Text leaves as it is: Text(Line(s)) ==
// Line(s). A line break in s is escaped too: Text is one line.
func Text(s string) string { return text.escape(s) }

// Output is a command's multi-line output made safe as Text makes each
// of its lines (tabs and backslashes kept), its line breaks kept: for
// what a sandbox printed, shown to a person as it printed it. A carriage
// return just before a line break is dropped (a terminal shows CRLF as a
// line break); any other is escaped.
func Output(s string) string {
	if !text.needs(strings.ReplaceAll(s, "\n", "")) {
		return s
	}
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = text.escape(strings.TrimSuffix(l, "\r"))
	}
	return strings.Join(lines, "\n")
}

// Lines is multi-line output (a check's) as lines to print: each of s's
// lines escaped by Line (a lone \r before the line break dropped, as a
// terminal would show it) and starting with prefix, so that no line of
// it can pass for one that its reader prints itself. A last line break
// ends the last line; it makes no empty line.
func Lines(s, prefix string) []string {
	s = strings.TrimSuffix(s, "\n")
	if s == "" {
		return nil
	}
	parts := strings.Split(s, "\n")
	for i, p := range parts {
		parts[i] = prefix + Line(strings.TrimSuffix(p, "\r"))
	}
	return parts
}

// Path is a file name as git shows it (core.quotePath=false): as it is
// when it needs no escape, else in double quotes with C's escapes and
// git's \NNN for other bytes ("a\033[2J", "\342\200\256txt.exe"), which
// git apply and patch read back. Unlike git, printable non-ASCII text
// stays as it is; what Line escapes is quoted.
func Path(s string) string {
	if !path.needs(s) {
		return s
	}
	return `"` + path.escape(s) + `"`
}

// JSON escapes in a JSON text (encoding/json's output) what encoding/json
// leaves raw and a terminal acts on: DEL, C1 controls and format
// characters (bidi overrides), as \uNNNN (a pair above U+FFFF). The text
// means the same: such runes only occur inside strings. An audit log a
// person reads with cat or less then shows them escaped.
func JSON(text []byte) []byte {
	if !jsonNeeds(text) {
		return text
	}
	out := make([]byte, 0, len(text)+32)
	for i := 0; i < len(text); {
		r, n := utf8.DecodeRune(text[i:])
		if !jsonEscapes(r, n) {
			out = append(out, text[i:i+n]...)
			i += n
			continue
		}
		if r1, r2 := utf16.EncodeRune(r); r1 != utf8.RuneError {
			out = fmt.Appendf(out, `\u%04x\u%04x`, r1, r2)
		} else {
			out = fmt.Appendf(out, `\u%04x`, r)
		}
		i += n
	}
	return out
}

// jsonEscapes: r (n bytes) is one JSON must escape here. C0 controls
// stay: encoding/json escaped those in strings, and outside them they
// are the text's own white space (a line's end).
func jsonEscapes(r rune, n int) bool {
	return r >= 0x7f && !(r == utf8.RuneError && n <= 1) && unsafe(r)
}

func jsonNeeds(text []byte) bool {
	for i := 0; i < len(text); {
		r, n := utf8.DecodeRune(text[i:])
		if jsonEscapes(r, n) {
			return true
		}
		i += n
	}
	return false
}
