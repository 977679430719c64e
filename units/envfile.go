package units

import (
	"bytes"
	"fmt"
	"strings"
	"unicode/utf8"
)

// go-systemd reads unit properties but has no reader of the files that
// EnvironmentFile= names: systemd itself reads them when it starts a
// service's process (src/basic/env-file.c, parse_env_file_internal).
// parseEnvFile is that reader, written from systemd.exec(5) and checked
// against systemd's state machine, so that a sandbox gets what the service
// gets:
//
//   - lines are KEY=VALUE; leading whitespace is skipped; a line whose
//     first other character is '#' or ';' is a comment, to its end; a
//     backslash at its end continues it onto the next line before systemd
//     254, and not since (parseEnvFile's commentsContinue); a line without
//     '=' is skipped;
//   - whitespace around the key, and around an unquoted value, is dropped;
//     whitespace inside a value is kept;
//   - unquoted, a backslash keeps the character after it ("\\" is "\") and
//     a backslash before a newline joins the next line;
//   - '...' keeps everything up to the next quote verbatim, newlines too;
//   - "..." may span lines; in it a backslash before one of " \ ` $ keeps
//     that character, before a newline joins the lines, and before anything
//     else is kept with what follows;
//   - quotes may follow each other and unquoted text ('a'"b"c is abc);
//     a quote after the first character of unquoted text is kept as is;
//   - a later assignment of a key replaces an earlier one, in its place.
//
// Both "\n" and "\r" end a line, as they do for systemd. Where this
// differs from systemd: a file holding a NUL byte is refused (systemd
// stops reading at it), as is invalid UTF-8 (systemd refuses the file too).
// Assignments whose name is not a valid one (systemd drops them with a
// warning) are left to the caller (validAssignment).

const (
	envWhitespace = " \t\n\r"
	envNewline    = "\n\r"
	envComments   = "#;"
	// envShellEscapes are what a backslash escapes in double quotes.
	envShellEscapes = "\"\\`$"
)

// envState is where parseEnvFile is in a line.
type envState int

const (
	preKey envState = iota
	inKey
	preValue
	inValue
	valueEscape
	singleQuoted
	doubleQuoted
	doubleQuotedEscape
	inComment
	commentEscape
)

// envParser holds the assignment being read.
type envParser struct {
	out              []string
	index            map[string]int // key -> its place in out
	key, value       []byte
	keyEnd, valueEnd int // where trailing whitespace starts, -1: none yet
	line             int // of the assignment's end, for messages
	commentsContinue bool
}

// parseEnvFile reads an environment file's contents into KEY=VALUE
// assignments, in the order of their first assignment. commentsContinue:
// a comment that ends in a backslash goes on over the next line, as it
// does before systemd 254.
func parseEnvFile(data []byte, commentsContinue bool) ([]string, error) {
	if i := bytes.IndexByte(data, 0); i >= 0 {
		return nil, fmt.Errorf("line %d holds a NUL byte", 1+bytes.Count(data[:i], []byte{'\n'}))
	}
	p := &envParser{index: map[string]int{}, line: 1, keyEnd: -1, valueEnd: -1, commentsContinue: commentsContinue}
	state := preKey
	for _, c := range data {
		var err error
		if state, err = p.step(state, c); err != nil {
			return nil, err
		}
	}
	switch state {
	case preValue, inValue, valueEscape, singleQuoted, doubleQuoted, doubleQuotedEscape:
		// The file ends in a value (an unterminated quote included): it
		// counts, as in systemd. Only a plain value loses its trailing
		// whitespace.
		if err := p.push(state == inValue); err != nil {
			return nil, err
		}
	}
	return p.out, nil
}

func isIn(c byte, set string) bool { return strings.IndexByte(set, c) >= 0 }

// step takes one character in state and returns the next state.
func (p *envParser) step(state envState, c byte) (envState, error) {
	switch state {
	case preKey:
		switch {
		case isIn(c, envComments):
			return inComment, nil
		case !isIn(c, envWhitespace):
			p.key, p.keyEnd = append(p.key[:0], c), -1
			return inKey, nil
		}
		if isIn(c, envNewline) {
			p.line++
		}
		return preKey, nil
	case inKey:
		switch {
		case isIn(c, envNewline): // no '=': not an assignment
			p.line++
			p.key = p.key[:0]
			return preKey, nil
		case c == '=':
			p.value, p.valueEnd = p.value[:0], -1
			return preValue, nil
		}
		p.key, p.keyEnd = appendTracked(p.key, p.keyEnd, c)
		return inKey, nil
	case preValue, inValue:
		return p.value1(state, c)
	case valueEscape:
		if !isIn(c, envNewline) { // an escaped newline joins the lines
			p.value = append(p.value, c)
		} else {
			p.line++
		}
		return inValue, nil
	case singleQuoted:
		if c == '\'' {
			return preValue, nil
		}
		p.countLine(c)
		p.value = append(p.value, c)
		return singleQuoted, nil
	case doubleQuoted:
		switch c {
		case '"':
			return preValue, nil
		case '\\':
			return doubleQuotedEscape, nil
		}
		p.countLine(c)
		p.value = append(p.value, c)
		return doubleQuoted, nil
	case doubleQuotedEscape:
		switch {
		case isIn(c, envShellEscapes):
			p.value = append(p.value, c)
		case c == '\n':
			p.line++ // a continuation: both are dropped
		default:
			p.value = append(p.value, '\\', c)
		}
		return doubleQuoted, nil
	case commentEscape:
		if isIn(c, envNewline) {
			p.line++
			if !p.commentsContinue {
				return preKey, nil
			}
		}
		return inComment, nil
	default: // inComment
		switch {
		case c == '\\':
			return commentEscape, nil
		case isIn(c, envNewline):
			p.line++
			return preKey, nil
		}
		return inComment, nil
	}
}

// value1 takes a character of a value before it is quoted (preValue) or
// in its unquoted text (inValue).
func (p *envParser) value1(state envState, c byte) (envState, error) {
	switch {
	case isIn(c, envNewline):
		// The value ends; only unquoted text loses its trailing whitespace.
		err := p.push(state == inValue)
		p.line++
		return preKey, err
	case c == '\\':
		p.valueEnd = -1 // what the backslash keeps is not trailing whitespace
		return valueEscape, nil
	case state == preValue && c == '\'':
		return singleQuoted, nil
	case state == preValue && c == '"':
		return doubleQuoted, nil
	case state == preValue && isIn(c, envWhitespace):
		return preValue, nil
	}
	p.value, p.valueEnd = appendTracked(p.value, p.valueEnd, c)
	return inValue, nil
}

// appendTracked appends c to b, keeping end at the start of b's trailing
// whitespace (-1 when b does not end in whitespace).
func appendTracked(b []byte, end int, c byte) ([]byte, int) {
	switch {
	case !isIn(c, envWhitespace):
		end = -1
	case end < 0:
		end = len(b)
	}
	return append(b, c), end
}

func (p *envParser) countLine(c byte) {
	if c == '\n' {
		p.line++
	}
}

// push ends an assignment; chomp drops the value's trailing whitespace.
func (p *envParser) push(chomp bool) error {
	key, value := p.key, p.value
	if p.keyEnd >= 0 {
		key = key[:p.keyEnd]
	}
	if chomp && p.valueEnd >= 0 {
		value = value[:p.valueEnd]
	}
	if !utf8.Valid(key) || !utf8.Valid(value) {
		return fmt.Errorf("line %d: the assignment of %q is not valid UTF-8", p.line, strings.ToValidUTF8(string(key), "\uFFFD"))
	}
	kv := string(key) + "=" + string(value)
	if i, ok := p.index[string(key)]; ok {
		p.out[i] = kv
	} else {
		p.index[string(key)] = len(p.out)
		p.out = append(p.out, kv)
	}
	p.key, p.value = p.key[:0], p.value[:0]
	return nil
}

// ValidEnvName reports whether name is a variable name systemd passes on
// (env_name_is_valid): letters, digits and '_', not starting with a digit.
func ValidEnvName(name string) bool {
	if name == "" || '0' <= name[0] && name[0] <= '9' {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// validAssignment reports whether kv is an assignment systemd passes on
// to a service: a valid name, '=', and a value of valid UTF-8 (systemd
// drops the others, with a warning in its journal).
func validAssignment(kv string) bool {
	name, value, ok := strings.Cut(kv, "=")
	return ok && ValidEnvName(name) && utf8.ValidString(value) && !strings.ContainsRune(value, 0)
}
