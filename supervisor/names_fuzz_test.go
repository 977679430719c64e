package supervisor_test

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/supervisor"
)

// FuzzValidateSandboxName: a sandbox name is accepted exactly when it is a
// volume name (cowfs.ValidateName) that cannot be read as a sandbox id (12
// lowercase hex digits). A refusal is valid UTF-8 (it travels in a D-Bus
// error), starts with the name quoted (cut at 40 bytes), as its callers
// expect when they put "option Name " before it, and a refusal for the
// volume name's rule states that rule.
//
// It needs no testbed, but the package's TestMain boots one (as it does
// for every test here): under -fuzz the coordinator and its workers run
// inside it.
func FuzzValidateSandboxName(f *testing.F) {
	for _, s := range []string{
		"agent-1", "web.v2", "0123456789ab", "0123456789aB", "0123456789abc", "deadbeefcafe",
		"", ".x", "-x", "a/b", "a b", "é", strings.Repeat("n", 100), strings.Repeat("n", 101),
		strings.Repeat("é", 30),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if len(name) > 256 { // longer, minimizing takes long; see cowfs's maxInput
			return
		}
		err := supervisor.ValidateSandboxName(name)
		volErr := cowfs.ValidateName(name)
		id := looksLikeID(name)
		if want := volErr == nil && !id; (err == nil) != want {
			t.Fatalf("ValidateSandboxName(%q) = %v; want valid=%v (volume name: %v; looks like an id: %v)", name, err, want, volErr, id)
		}
		if err == nil {
			return
		}
		msg := err.Error()
		if !utf8.ValidString(msg) {
			t.Fatalf("ValidateSandboxName(%q): the message %q is not valid UTF-8", name, msg)
		}
		quoted := fmt.Sprintf("%q", name)
		if len(name) > 40 {
			quoted = fmt.Sprintf("%q...", name[:40])
		}
		if !strings.HasPrefix(msg, quoted) {
			t.Fatalf("ValidateSandboxName(%q) = %q; want it to start with %s", name, msg, quoted)
		}
		if volErr != nil && !strings.Contains(msg, "letters, digits, '-', '_' and '.'") {
			t.Fatalf("ValidateSandboxName(%q) = %q; want the rule stated", name, msg)
		}
		if volErr == nil && !strings.Contains(msg, "sandbox id") {
			t.Fatalf("ValidateSandboxName(%q) = %q; want it to say it reads as a sandbox id", name, msg)
		}
	})
}

// looksLikeID: 12 lowercase hex digits, the form of a sandbox's id.
func looksLikeID(s string) bool {
	if len(s) != 12 {
		return false
	}
	return strings.Trim(s, "0123456789abcdef") == ""
}
