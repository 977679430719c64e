package config

import (
	"encoding"
	"fmt"
	"reflect"
	"strings"

	"github.com/BurntSushi/toml"
)

// The keys a file may hold are read off Config's toml tags, so a field
// added to Config (a section, a map of profiles, an array of stages) is
// known without a list to keep in step. The decoder's own check,
// MetaData.Undecoded, is not used: the decoder fills a field from a key
// that differs in case ("Log_Level"), and counts that key as decoded.

// unknownKeys reports each key in the file that Config has no field for,
// once per unknown table or key.
func unknownKeys(file string, w *where) []*Error {
	var errs []*Error
	seen := map[string]bool{}
	keys := w.doc.md.Keys()
	for j, key := range keys {
		u, parent := unknownAt(reflect.TypeFor[Config](), key)
		if u < 0 {
			continue
		}
		name, rootName, line := key.String(), key[:u+1].String(), 0
		if arr, ok := w.arrayOf(key[:u+1]); ok {
			i := -1 // an inline array's elements cannot be told apart
			if w.doc.md.Type(arr...) == "ArrayHash" {
				i = countKey(keys[:j], arr) - 1
			}
			name = elemName(arr, i, key[len(arr):])
			rootName = elemName(arr, i, key[len(arr):u+1])
			line = w.elemLine(arr, i, key[len(arr):])
		} else {
			line = w.line(key...)
		}
		if seen[rootName] {
			continue // a key below a table already reported
		}
		seen[rootName] = true

		what := "key " + name
		switch w.doc.md.Type(key...) {
		case "Hash":
			what = "section [" + name + "]"
		case "ArrayHash":
			what = "section [[" + name + "]]"
		}
		msg := "unknown " + what
		if parent != nil {
			in := "at top level"
			if u > 0 {
				in = "in " + key[:u].String()
			}
			msg += fmt.Sprintf(" (allowed %s: %s)", in, strings.Join(fieldNames(parent), ", "))
		}
		errs = append(errs, &Error{File: file, Line: line, Key: name, Msg: msg})
	}
	return errs
}

// notTables reports each table of named things (like profile) that the
// file sets to something other than a table, which the decoder would
// otherwise pass over in silence.
func notTables(file string, w *where) []*Error {
	var errs []*Error
	for _, key := range w.doc.md.Keys() {
		t := schemaType(reflect.TypeFor[Config](), key)
		typ := w.doc.md.Type(key...)
		if t == nil || deref(t).Kind() != reflect.Map || typ == "Hash" {
			continue
		}
		what, ok := tomlTypes[typ]
		if !ok {
			what = typ
		}
		errs = append(errs, &Error{File: file, Line: w.line(key...), Key: key.String(),
			Msg: fmt.Sprintf("%s: want a table, not %s", key, what)})
	}
	return errs
}

// tomlTypes words MetaData.Type's names.
var tomlTypes = map[string]string{
	"String": "a string", "Integer": "an integer", "Float": "a float", "Bool": "a boolean",
	"Datetime": "a date or time", "DatetimeLocal": "a date or time", "DateLocal": "a date or time", "TimeLocal": "a date or time",
	"Array": "an array", "ArrayHash": "an array of tables",
}

// unknownAt finds the first part of key that type t has no field for, and
// the struct it is missing from (nil when the part is below a plain value).
// It is -1 when t knows the whole key.
func unknownAt(t reflect.Type, key toml.Key) (int, reflect.Type) {
	for i, name := range key {
		t = deref(t)
		switch {
		case isValue(t):
			return i, nil
		case t.Kind() == reflect.Map:
			t = t.Elem() // any name: a table of named things
		case t.Kind() == reflect.Struct:
			f, ok := fieldByKey(t, name)
			if !ok {
				return i, t
			}
			t = f.Type
		default:
			return i, nil
		}
	}
	return -1, nil
}

// schemaType is the Go type that holds key, or nil.
func schemaType(t reflect.Type, key toml.Key) reflect.Type {
	for _, name := range key {
		switch t = deref(t); t.Kind() {
		case reflect.Map:
			t = t.Elem()
		case reflect.Struct:
			f, ok := fieldByKey(t, name)
			if !ok {
				return nil
			}
			t = f.Type
		default:
			return nil
		}
	}
	return t
}

// deref looks through pointers, and through slices to their elements, as
// the keys of an array of tables do.
func deref(t reflect.Type) reflect.Type {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
		t = t.Elem()
	}
	return t
}

// isValue reports whether t decodes itself (like Size), and so has no keys
// below it even if it is a struct.
func isValue(t reflect.Type) bool {
	p := reflect.PointerTo(t)
	return p.Implements(reflect.TypeFor[toml.Unmarshaler]()) || p.Implements(reflect.TypeFor[encoding.TextUnmarshaler]())
}

func fieldByKey(t reflect.Type, key string) (reflect.StructField, bool) {
	for _, f := range reflect.VisibleFields(t) {
		if f.IsExported() && tagName(f) == key {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

func fieldNames(t reflect.Type) []string {
	var names []string
	for _, f := range reflect.VisibleFields(t) {
		if f.IsExported() && tagName(f) != "" {
			names = append(names, tagName(f))
		}
	}
	return names
}

func tagName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
	return name
}
