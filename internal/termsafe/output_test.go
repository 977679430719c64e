package termsafe_test

import (
	"testing"

	"github.com/sandboxd/sandboxd/internal/termsafe"
)

func TestOutputKeepsLinesAndTabsAndEscapesTheRest(t *testing.T) {
	for in, want := range map[string]string{
		"plain\ttext\nnext line\n": "plain\ttext\nnext line\n",
		"crlf\r\nline\r\n":         "crlf\nline\n",
		"a\x1b[2J\rFAKE\n":         "a\\x1b[2J\\rFAKE\n",
		"c1\u009b31m\n":            "c1\\u009b31m\n",
		"rlo\u202etxt.sh\n":        "rlo\\u202etxt.sh\n",
		"title\x1b]0;pwned\a":      "title\\x1b]0;pwned\\a",
		"back\\slash\xff\n":        "back\\slash\\xff\n",
	} {
		if got := termsafe.Output(in); got != want {
			t.Errorf("Output(%q) = %q; want %q", in, got, want)
		}
	}
}
