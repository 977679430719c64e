package config

import (
	"errors"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"
)

// The TOML decoder knows the line of every key but does not export it
// (BurntSushi/toml#462). It does report it in a toml.ParseError when an
// Unmarshaler fails, so asking for a key's line means decoding that key's
// value into a probe that always fails.
//
// The decoder keeps one position per dotted key, so in an array of tables,
// "project.name" is at the last [[project]] that sets it. For an earlier
// element, the text is cut just before the next element's header (text
// before a header line is whole TOML) and parsed again.

// doc is one parse of a TOML text.
type doc struct {
	text string
	md   toml.MetaData
	top  toml.Primitive
}

func parseDoc(text string) (*doc, error) {
	d := &doc{text: text}
	md, err := toml.Decode(text, &d.top)
	if err != nil {
		return nil, err
	}
	d.md = md
	return d, nil
}

type probe struct{}

var errProbe = errors.New("probe")

func (probe) UnmarshalTOML(any) error { return errProbe }

// line is where key is set (its last setting, in an array of tables), or 0.
// A key the parser files under its table (one named "") takes the table's.
func (d *doc) line(key toml.Key) int {
	for n := len(key); n > 0; n-- {
		v, ok := d.value(key[:n])
		var pe toml.ParseError
		if ok && errors.As(d.md.PrimitiveDecode(v, probe{}), &pe) && pe.Position.Line > 0 {
			return pe.Position.Line
		}
	}
	return 0
}

// value finds key's value, undecoded.
func (d *doc) value(key toml.Key) (toml.Primitive, bool) {
	v := d.top
	for _, name := range key {
		var ok bool
		if v, ok = d.child(v, name); !ok {
			return v, false
		}
	}
	return v, true
}

// child is the value of key name in table v, or in any element of array v:
// each element carries the same dotted key, and so the same position. The
// last element is tried first, as it is likeliest to have it.
func (d *doc) child(v toml.Primitive, name string) (toml.Primitive, bool) {
	var list []toml.Primitive
	if d.md.PrimitiveDecode(v, &list) == nil {
		for _, e := range slices.Backward(list) {
			if c, ok := d.child(e, name); ok {
				return c, true
			}
		}
		return toml.Primitive{}, false
	}
	var table map[string]toml.Primitive
	if d.md.PrimitiveDecode(v, &table) != nil {
		return toml.Primitive{}, false
	}
	c, ok := table[name]
	return c, ok
}

// where answers "on which line" for one file's messages.
type where struct {
	doc   *doc
	elems map[string][]element // by array of tables, filled when asked
}

// element is one entry of an array of tables.
type element struct {
	header int            // the line of its [[header]], 0 if not found
	keys   map[string]int // the line of each key below it, by the rest of the key
}

func newWhere(d *doc) *where {
	return &where{doc: d, elems: map[string][]element{}}
}

// line is where key, outside arrays of tables, is set; 0 when w is nil.
func (w *where) line(key ...string) int {
	if w == nil {
		return 0
	}
	return w.doc.line(key)
}

// arrayOf finds the array (of tables, or an inline array) that key is in:
// the longest proper prefix of key that is one.
func (w *where) arrayOf(key toml.Key) (toml.Key, bool) {
	for n := len(key) - 1; n > 0; n-- {
		switch w.doc.md.Type(key[:n]...) {
		case "ArrayHash", "Array":
			return key[:n], true
		}
	}
	return nil, false
}

// elemLine is where rest is set in element i of the array arr; the
// element's header when rest is empty or not set there. In an inline array,
// which has no headers to cut at, it is where the array begins.
func (w *where) elemLine(arr toml.Key, i int, rest toml.Key) int {
	if w == nil {
		return 0
	}
	els := w.elements(arr)
	if i < 0 || i >= len(els) {
		return w.doc.line(arr)
	}
	if l, ok := els[i].keys[rest.String()]; ok {
		return l
	}
	return els[i].header
}

// elements finds the lines of each element of the array of tables arr, by
// parsing the text with the elements after it cut off, last one first: a
// parse per element, which is quick for the tens of projects a file holds
// (and only done for a file with something to report).
func (w *where) elements(arr toml.Key) []element {
	name := arr.String()
	if els, ok := w.elems[name]; ok {
		return els
	}
	var els []element
	if w.doc.md.Type(arr...) == "ArrayHash" {
		els = make([]element, countKey(w.doc.md.Keys(), arr))
	}
	d := w.doc
	for i := len(els) - 1; i >= 0; i-- {
		keys := d.md.Keys()
		if countKey(keys, arr) != i+1 {
			break // not the text it was expected to be: leave the rest unknown
		}
		h := len(keys) - 1 // the element's header: the last one
		for !slices.Equal(keys[h], arr) {
			h--
		}
		el := element{header: d.line(arr), keys: map[string]int{}}
		for _, k := range keys[h+1:] {
			if len(k) > len(arr) && slices.Equal(k[:len(arr)], arr) {
				el.keys[k[len(arr):].String()] = d.line(k)
			}
		}
		els[i] = el
		if el.header == 0 {
			break
		}
		var err error
		if d, err = parseDoc(cutBefore(d.text, el.header)); err != nil {
			break
		}
	}
	w.elems[name] = els
	return els
}

// failingElement finds the first element of the array arr that does not
// decode into a value of type t (the array's Go type), or -1.
func (w *where) failingElement(arr toml.Key, t reflect.Type) int {
	v, ok := w.doc.value(arr)
	var list []toml.Primitive
	if !ok || t == nil || t.Kind() != reflect.Slice || w.doc.md.PrimitiveDecode(v, &list) != nil {
		return -1
	}
	for i, e := range list {
		if w.doc.md.PrimitiveDecode(e, reflect.New(t.Elem()).Interface()) != nil {
			return i
		}
	}
	return -1
}

// elemName names a key in element i of arr the way messages do:
// "project[1].path"; "project.path" when i is not known (-1).
func elemName(arr toml.Key, i int, rest toml.Key) string {
	s := arr.String()
	if i >= 0 {
		s += "[" + strconv.Itoa(i) + "]"
	}
	if len(rest) > 0 {
		s += "." + rest.String()
	}
	return s
}

func countKey(keys []toml.Key, key toml.Key) int {
	n := 0
	for _, k := range keys {
		if slices.Equal(k, key) {
			n++
		}
	}
	return n
}

// cutBefore is text up to the start of line (counted from 1).
func cutBefore(text string, line int) string {
	off := 0
	for n := 1; n < line; n++ {
		i := strings.IndexByte(text[off:], '\n')
		if i < 0 {
			return text
		}
		off += i + 1
	}
	return text[:off]
}
