package cowfs

import (
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// Volume and dataset names reach the filesystem as path components and
// zfs(8) arguments: what the validators accept must be exactly their
// documented alphabet, and what they refuse must be refused with
// ErrInvalidName and a message fit for a D-Bus error (valid UTF-8) that
// names what is wrong.

// FuzzValidateName: ValidateName accepts exactly the documented names
// (checked against a byte-wise oracle); an accepted name is one clean path
// component and a valid ZFS dataset component; a refusal wraps
// ErrInvalidName, quotes the name and, when a character is at fault, names
// that character.
func FuzzValidateName(f *testing.F) {
	for _, s := range []string{
		"web", "agent-1", "my_project.v2", "A", strings.Repeat("x", MaxNameLen),
		"", ".", "..", ".hidden", "-rf", "a/b", "a b", "a\x00b", "a@b", "tank/x",
		"é", "aé", "a\xffb", "a\u202eb", strings.Repeat("x", MaxNameLen+1),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if len(name) > maxInput {
			return
		}
		err := ValidateName(name)
		want := nameOracle(name)
		if (err == nil) != want {
			t.Fatalf("ValidateName(%q) = %v; the documented rule says valid=%v", name, err, want)
		}
		if err == nil {
			if path.Clean(name) != name || path.Base(name) != name || name == "." || name == ".." {
				t.Fatalf("ValidateName accepted %q, which is not one clean path component", name)
			}
			if p := DatasetNameProblem("tank/" + name); p != "" {
				t.Fatalf("ValidateName accepted %q, which cannot name a dataset: tank/%s %s", name, name, p)
			}
			return
		}
		checkRefusal(t, "ValidateName", name, err)
		msg := err.Error()
		switch {
		case name == "":
		case len(name) > MaxNameLen:
			if !strings.Contains(msg, strconv.Itoa(len(name))) {
				t.Fatalf("ValidateName(%d bytes): %q does not say how long it is", len(name), msg)
			}
		default:
			if !strings.Contains(msg, strconv.Quote(name)) {
				t.Fatalf("ValidateName(%q): %q does not quote the name", name, msg)
			}
			if bad, ok := firstBadRune(name, nameRune); ok && name[0] != '.' && name[0] != '-' {
				if !strings.Contains(msg, bad) {
					t.Fatalf("ValidateName(%q): %q does not name the character at fault, %s", name, msg, bad)
				}
			}
		}
	})
}

// FuzzValidateDataset: ValidateDataset accepts exactly the documented
// dataset names (pool/child..., checked against an oracle); one it accepts
// is a clean relative path of two or more components, at most 255 bytes,
// without "@"; a refusal wraps ErrInvalidName and says the problem that
// DatasetNameProblem states.
func FuzzValidateDataset(f *testing.F) {
	for _, s := range []string{
		"tank/sandboxd", "tank/a/b/c", "rpool/ROOT/ubuntu_1:2", "t/" + strings.Repeat("x", 253),
		"", "tank", "/tank/x", "tank/x/", "tank//x", "tank/x@snap", "tank/./x", "tank/../x",
		"1tank/x", "tank/x y", "tank/é", "tank/\xff", "t/" + strings.Repeat("x", 254),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if len(name) > maxInput {
			return
		}
		err := ValidateDataset(name)
		problem := DatasetNameProblem(name)
		if (err == nil) != (problem == "") {
			t.Fatalf("ValidateDataset(%q) = %v, but DatasetNameProblem says %q", name, err, problem)
		}
		if want := datasetOracle(name); (err == nil) != want {
			t.Fatalf("ValidateDataset(%q) = %v; the documented rule says valid=%v", name, err, want)
		}
		if err == nil {
			if path.Clean("/"+name) != "/"+name || strings.Count(name, "/") < 1 || len(name) > 255 || strings.Contains(name, "@") {
				t.Fatalf("ValidateDataset accepted %q: not a clean pool/child name", name)
			}
			return
		}
		checkRefusal(t, "ValidateDataset", name, err)
		if !strings.Contains(err.Error(), problem) {
			t.Fatalf("ValidateDataset(%q): %q does not say %q", name, err, problem)
		}
		if shown, ok := strings.CutPrefix(problem, "holds "); ok {
			bad, _ := firstBadRune(name, func(r rune) bool { return r == '/' || datasetRune(r) })
			if shown != bad {
				t.Fatalf("ValidateDataset(%q): %q names %s; the first character at fault is %s", name, err, shown, bad)
			}
		}
	})
}

// maxInput bounds the inputs, above the longest names allowed: Go
// minimizes an interesting input by trying it without each span of its
// bytes, which takes the square of its length in runs. Longer inputs are
// skipped; they are never interesting.
const maxInput = 300

// checkRefusal: the error wraps ErrInvalidName and is valid UTF-8, so that
// it can travel in a D-Bus error.
func checkRefusal(t *testing.T, fn, name string, err error) {
	t.Helper()
	if !errors.Is(err, ErrInvalidName) {
		t.Fatalf("%s(%q): %v does not wrap ErrInvalidName", fn, name, err)
	}
	if !utf8.ValidString(err.Error()) {
		t.Fatalf("%s(%q): the message %q is not valid UTF-8 (a D-Bus error could not carry it)", fn, name, err)
	}
}

func nameRune(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.'
}

func datasetRune(r rune) bool { return nameRune(r) || r == ':' }

// firstBadRune returns the first rune of s that ok refuses, as %q prints a
// rune ('\xff' bytes of invalid UTF-8 as '\ufffd').
func firstBadRune(s string, ok func(rune) bool) (string, bool) {
	for _, r := range s {
		if !ok(r) {
			return fmt.Sprintf("%q", r), true
		}
	}
	return "", false
}

// nameOracle is ValidateName's documented rule, byte by byte.
func nameOracle(s string) bool {
	if s == "" || len(s) > MaxNameLen || s[0] == '.' || s[0] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !nameRune(rune(s[i])) {
			return false
		}
	}
	return true
}

// datasetOracle is DatasetNameProblem's documented rule, byte by byte.
func datasetOracle(s string) bool {
	if len(s) == 0 || len(s) > 255 {
		return false
	}
	parts := strings.Split(s, "/")
	if len(parts) < 2 {
		return false
	}
	if c := parts[0][0:min(1, len(parts[0]))]; c == "" || !(c[0] >= 'a' && c[0] <= 'z' || c[0] >= 'A' && c[0] <= 'Z') {
		return false
	}
	for _, p := range parts {
		if p == "" || p == "." || p == ".." {
			return false
		}
		for i := 0; i < len(p); i++ {
			if !datasetRune(rune(p[i])) {
				return false
			}
		}
	}
	return true
}
