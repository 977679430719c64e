package config

import (
	"cmp"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"
)

// ErrInvalid is wrapped by every error about a configuration's contents:
// syntax, unknown keys, types and values. An error that does not wrap it
// (a file that cannot be read) is about the file, not what is in it.
var ErrInvalid = errors.New("invalid configuration")

// Error is one problem in a configuration.
type Error struct {
	File string // the name given to Parse, or the path given to Load
	Line int    // where in File, from 1; 0 when not known
	Key  string // the key at fault, like "project[1].path"; "" for syntax
	Msg  string // what is wrong and what is allowed, naming Key
	Err  error  // the cause, if any: a toml.ParseError, a cowfs error
}

// Error reads "file:line: message", leaving out what is not known.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		if e.File == "" {
			b.WriteString("line ")
		} else {
			b.WriteString(":")
		}
		b.WriteString(strconv.Itoa(e.Line))
	}
	if b.Len() > 0 {
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Unwrap gives ErrInvalid, and the cause when there is one.
func (e *Error) Unwrap() []error {
	if e.Err == nil {
		return []error{ErrInvalid}
	}
	return []error{ErrInvalid, e.Err}
}

// joinErrors puts the errors in the order of the file's lines.
func joinErrors(errs []*Error) error {
	slices.SortStableFunc(errs, func(a, b *Error) int { return cmp.Compare(a.Line, b.Line) })
	all := make([]error, len(errs))
	for i, e := range errs {
		all[i] = e
	}
	return errors.Join(all...)
}

// syntaxError turns what the TOML parser says into an *Error at its line.
func syntaxError(file string, err error) error {
	e := &Error{File: file, Msg: strings.TrimPrefix(err.Error(), "toml: "), Err: err}
	var pe toml.ParseError
	if errors.As(err, &pe) {
		// The parser counts a newline that ends a bad first line as the
		// line before it: line 0.
		e.Line, e.Msg = max(pe.Position.Line, 1), pe.Message
	}
	return e
}

// decoderMsg is how the TOML decoder words a type error, which has the line
// and key only in its text.
var decoderMsg = regexp.MustCompile(`(?s)^toml: (?:line (\d+) )?\(last key ("(?:[^"\\]|\\.)*")\): (.*)$`)

// decodeError turns a decoder's error (a value of the wrong type, a bad
// size) into an *Error naming the key. The decoder places a key inside an
// array of tables at the last element that sets it; the element at fault
// is found by decoding each alone.
func decodeError(file string, w *where, err error) error {
	e := &Error{File: file, Msg: strings.TrimPrefix(err.Error(), "toml: "), Err: err}
	var pe toml.ParseError
	if errors.As(err, &pe) {
		e.Line, e.Key, e.Msg = pe.Position.Line, pe.LastKey, pe.Message
	} else if m := decoderMsg.FindStringSubmatch(err.Error()); m != nil {
		e.Line, _ = strconv.Atoi(m[1])
		e.Key, _ = strconv.Unquote(m[2])
		e.Msg = m[3]
	}
	e.Msg = plainTypes(e.Msg)
	if e.Key == "" {
		return e
	}
	key := w.keyNamed(e.Key)
	if e.Line == 0 {
		e.Line = w.line(key...)
	}
	if arr, ok := w.arrayOf(key); ok {
		if i := w.failingElement(arr, schemaType(reflect.TypeFor[Config](), arr)); i >= 0 {
			e.Key = elemName(arr, i, key[len(arr):])
			e.Line = w.elemLine(arr, i, key[len(arr):])
		}
	}
	e.Msg = fmt.Sprintf("%s: %s", e.Key, e.Msg)
	return e
}

// keyNamed finds the file's key that name is, as toml.Key.String writes
// it: a key below a table of named things (a profile's) may have a "." in
// a part, written quoted.
func (w *where) keyNamed(name string) toml.Key {
	for _, k := range w.doc.md.Keys() {
		if k.String() == name {
			return k
		}
	}
	return toml.Key(strings.Split(name, "."))
}

var (
	incompatible = regexp.MustCompile(`^incompatible types: TOML value has type (.+); destination has type (.+)$`)
	notTable     = regexp.MustCompile(`^type mismatch for .+: expected table but found (.+)$`)
	kinds        = map[string]string{
		"string": "a string", "int64": "an integer", "integer": "an integer",
		"float64": "a float", "float": "a float", "bool": "a boolean", "boolean": "a boolean",
		"time.Time": "a date or time", "map[string]any": "a table", "map": "a table",
		"[]any": "an array", "slice": "an array", "[]map[string]any": "an array of tables",
	}
)

// plainTypes words the decoder's type errors in TOML's terms rather than
// Go's: "want a string, not an integer".
func plainTypes(msg string) string {
	kind := func(s string) string {
		if k, ok := kinds[s]; ok {
			return k
		}
		return s
	}
	if m := incompatible.FindStringSubmatch(msg); m != nil {
		return fmt.Sprintf("want %s, not %s", kind(m[2]), kind(m[1]))
	}
	if m := notTable.FindStringSubmatch(msg); m != nil {
		return fmt.Sprintf("want a table, not %s", kind(m[1]))
	}
	return msg
}
