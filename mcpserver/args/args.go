// Package args is the MCP server's tools' input schemas, typed plainly
// for generic clients, and the check of a call's raw arguments against
// them, in words a model (or a person with a generic client) acts on.
package args

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/sandboxd/sandboxd/client"
)

// Error is bad input found in the arguments: it reads as the daemon's
// InvalidArgs does.
type Error struct{ msg string }

func (e *Error) Error() string        { return e.msg }
func (e *Error) Is(target error) bool { return target == client.ErrInvalidArgs }

func errorf(format string, a ...any) error { return &Error{msg: fmt.Sprintf(format, a...)} }

// Schema is In's schema with plain types: a slice or map field is
// typed "array" or "object", not ["null", "array"] (a nil slice
// marshals as null, so the inference allows it). Generic clients fill a
// parameter from its one type: the inspector parses --tool-arg as JSON
// only for a parameter typed exactly "array" or "object".
func Schema[In any]() (*jsonschema.Schema, error) {
	s, err := jsonschema.For[In](nil)
	if err != nil {
		return nil, fmt.Errorf("inferring the input schema of %T: %w", *new(In), err)
	}
	plainTypes(s)
	return s, nil
}

// plainTypes makes each type list of s of a type and null the type alone.
func plainTypes(s *jsonschema.Schema) {
	if s == nil {
		return
	}
	if len(s.Types) == 2 && slices.Contains(s.Types, "null") {
		s.Type = s.Types[0]
		if s.Type == "null" {
			s.Type = s.Types[1]
		}
		s.Types = nil
	}
	for _, p := range s.Properties {
		plainTypes(p)
	}
	plainTypes(s.Items)
	plainTypes(s.AdditionalProperties)
	for _, d := range s.Defs {
		plainTypes(d)
	}
}

// Check checks a call's raw arguments against its tool's schema
// before the SDK's validation, so that bad input reads as what the
// field wants and what came: `ttl_minutes: want an integer, got the
// string "abc"`. The SDK validates again after; this only words it.
// An optional string, array or object given as null is taken as not
// given (some clients send null for what they leave out): the arguments
// without them are returned when there were any. A number or boolean
// given as null is refused: the inspector sends ttl_minutes=abc as null
// (JSON's NaN), and a bound silently dropped would surprise.
func Check(tool string, raw json.RawMessage, s *jsonschema.Schema) (json.RawMessage, error) {
	if len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
		raw = json.RawMessage("{}")
	}
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, errorf("the arguments of %s are not JSON: %v", tool, err)
	}
	args, ok := v.(map[string]any)
	if !ok {
		return nil, errorf("the arguments of %s: want an object of named arguments, got %s", tool, described(v))
	}
	names := slices.Sorted(maps.Keys(s.Properties))
	nulls := false
	for _, k := range slices.Sorted(maps.Keys(args)) {
		p, ok := s.Properties[k]
		if !ok {
			return nil, errorf("%s takes no argument %q: its arguments are %s", tool, k, strings.Join(names, ", "))
		}
		if args[k] == nil && !slices.Contains(s.Required, k) && slices.Contains([]string{"string", "array", "object"}, p.Type) {
			delete(args, k)
			nulls = true
			continue
		}
		if err := checkValue(k, args[k], p); err != nil {
			return nil, err
		}
	}
	for _, k := range s.Required {
		if _, ok := args[k]; !ok {
			return nil, errorf("%s: the argument %q is missing: %s", tool, k, s.Properties[k].Description)
		}
	}
	if nulls {
		b, err := json.Marshal(args)
		if err != nil {
			return nil, fmt.Errorf("the arguments of %s without their nulls: %w", tool, err)
		}
		return b, nil
	}
	return nil, nil
}

// checkValue checks v against s's type, and an array's items.
func checkValue(path string, v any, s *jsonschema.Schema) error {
	if s == nil || s.Type == "" {
		return nil
	}
	bad := func(want string) error {
		msg := fmt.Sprintf("%s: want %s, got %s", path, want, described(v))
		if v == nil && (s.Type == "integer" || s.Type == "number") {
			msg += " (a client that could not read the value as a number sends null: give digits, such as 30)"
		}
		if s.Description != "" {
			msg += " (" + path + ": " + s.Description + ")"
		}
		return errorf("%s", msg)
	}
	switch s.Type {
	case "string":
		if _, ok := v.(string); !ok {
			return bad("a string")
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			return bad("true or false")
		}
	case "number", "integer":
		n, ok := v.(json.Number)
		if !ok {
			return bad(wanted(s))
		}
		f, err := n.Float64()
		if err != nil {
			return bad(wanted(s))
		}
		if _, err := n.Int64(); s.Type == "integer" && err != nil && f != math.Trunc(f) {
			return bad(wanted(s))
		}
		if s.Minimum != nil && f < *s.Minimum {
			return bad(wanted(s))
		}
	case "array":
		items, ok := v.([]any)
		if !ok {
			return bad(wanted(s))
		}
		for i, item := range items {
			if err := checkValue(fmt.Sprintf("%s[%d]", path, i), item, s.Items); err != nil {
				return err
			}
		}
	case "object":
		if _, ok := v.(map[string]any); !ok {
			return bad("an object")
		}
	}
	return nil
}

// wanted says what a number or an array's schema wants.
func wanted(s *jsonschema.Schema) string {
	switch s.Type {
	case "integer":
		if s.Minimum != nil && *s.Minimum == 0 {
			return "an integer of 0 or more"
		}
		return "an integer"
	case "number":
		return "a number"
	case "array":
		if s.Items != nil && s.Items.Type != "" {
			return "an array of " + s.Items.Type + "s"
		}
		return "an array"
	}
	return s.Type
}

// described says what a JSON value is, briefly: the string "abc".
func described(v any) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case string:
		if len(v) > 60 {
			v = v[:60] + "..."
		}
		q, _ := json.Marshal(v)
		return "the string " + string(q)
	case bool:
		return fmt.Sprintf("%v", v)
	case json.Number:
		return "the number " + v.String()
	case []any:
		return fmt.Sprintf("an array of %d", len(v))
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}
