package config

import (
	"strings"

	"github.com/BurntSushi/toml"
)

// The decoder keeps no positions inside an array, but a message about one
// entry of a list written over several lines (a project's env) should
// name that entry's line. itemLines finds them by reading the array's text
// again, with just enough of TOML to step over its strings and comments.

// itemLines is the line of each of the n entries of the array at key rest
// of element i of the array of tables arr. Where the entries cannot be
// told apart, each has the key's line (0 when w is nil).
func (w *where) itemLines(arr toml.Key, i int, rest toml.Key, n int) []int {
	lines := make([]int, n)
	if w == nil || n == 0 {
		return lines
	}
	key := w.elemLine(arr, i, rest)
	found := arrayLines(w.doc.text, key)
	for j := range lines {
		lines[j] = key
		if len(found) == n {
			lines[j] = found[j]
		}
	}
	return lines
}

// arrayLines is the line of each string in the array that follows the
// first "=" of line key: nil when that is not an array of strings.
func arrayLines(text string, key int) []int {
	if key <= 0 {
		return nil
	}
	start := len(cutBefore(text, key))
	eq := strings.IndexByte(text[start:], '=')
	if eq < 0 || strings.Contains(text[start:start+eq], "\n") {
		return nil
	}
	s := &scan{text: text, at: start + eq + 1, line: key}
	s.space()
	if !s.take("[") {
		return nil
	}
	var lines []int
	for {
		s.space()
		switch {
		case s.take("]"):
			return lines
		case s.take(","):
		default:
			lines = append(lines, s.line)
			if !s.str() {
				return nil
			}
		}
	}
}

// scan reads TOML text at an offset, counting lines.
type scan struct {
	text string
	at   int
	line int
}

func (s *scan) take(p string) bool {
	if strings.HasPrefix(s.text[s.at:], p) {
		s.at += len(p)
		return true
	}
	return false
}

// space steps over whitespace, newlines and comments.
func (s *scan) space() {
	for s.at < len(s.text) {
		switch c := s.text[s.at]; c {
		case ' ', '\t', '\r':
			s.at++
		case '\n':
			s.at++
			s.line++
		case '#':
			for s.at < len(s.text) && s.text[s.at] != '\n' {
				s.at++
			}
		default:
			return
		}
	}
}

// str steps over one string of any of TOML's four kinds.
func (s *scan) str() bool {
	for _, q := range []struct {
		open    string
		escapes bool
	}{{`"""`, true}, {`'''`, false}, {`"`, true}, {`'`, false}} {
		if !s.take(q.open) {
			continue
		}
		for s.at < len(s.text) {
			switch {
			case s.take(q.open):
				return true
			case q.escapes && s.text[s.at] == '\\' && s.at+1 < len(s.text):
				s.at++ // the escaped character is stepped over below
			}
			if s.text[s.at] == '\n' {
				s.line++
			}
			s.at++
		}
		return false
	}
	return false
}
