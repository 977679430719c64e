package commands

import (
	"io"
	"reflect"
	"strings"
	"testing"
)

// The REPL's reader gives a block (indented lines, and a line closing a
// bracket) as one input, and each other line as its own.
func TestInputsSplitsBlocks(t *testing.T) {
	next := inputs(strings.NewReader("x = 1\ndef f(v):\n    return v\nf(x)\nfunction g() {\n  return 2\n}\ng()\nh() {\n\techo h\n}\n"))
	var got []string
	for {
		in, err := next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, in)
	}
	want := []string{"x = 1\n", "def f(v):\n    return v\n", "f(x)\n", "function g() {\n  return 2\n}\n", "g()\n", "h() {\n\techo h\n}\n"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("inputs: %q, want %q", got, want)
	}
}
