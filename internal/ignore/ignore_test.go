package ignore

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

type probe struct {
	path    string
	dir     bool
	ignored bool
}

// The examples of gitignore(5), each as git decides it (checked against
// `git check-ignore`), and the corners of the syntax it documents.
func TestMatchGitExamples(t *testing.T) {
	for _, tc := range []struct {
		name   string
		rules  string
		probes []probe
	}{
		{"a name at any depth", "hello.*", []probe{
			{"hello.txt", false, true}, {"src/hello.c", false, true}, {"hello", false, false}, {"ahello.c", false, false}}},
		{"a trailing slash: directories only, at any depth", "frotz/", []probe{
			{"frotz", true, true}, {"a/frotz", true, true}, {"frotz", false, false}, {"a/frotz/x.c", false, true}}},
		{"a slash in the middle anchors", "doc/frotz/", []probe{
			{"doc/frotz", true, true}, {"a/doc/frotz", true, false}, {"doc/frotz/y", false, true}}},
		{"a leading slash anchors", "/*.c", []probe{
			{"cat-file.c", false, true}, {"mozilla-sha1/sha1.c", false, false}}},
		{"foo/* and what is beneath", "foo/*", []probe{
			{"foo/test.json", false, true}, {"foo/bar", true, true}, {"foo/bar/hello.c", false, true}, {"foo", true, false}, {"a/foo/x", false, false}}},
		{"leading **/", "**/foo", []probe{
			{"foo", false, true}, {"a/foo", true, true}, {"a/b/foo", false, true}, {"a/foo/c", false, true}, {"afoo", false, false}}},
		{"leading **/ then a path", "**/foo/bar", []probe{
			{"foo/bar", false, true}, {"x/foo/bar", false, true}, {"x/y/foo/bar", true, true}, {"foo/baz", false, false}}},
		{"trailing /**: what is inside, not the directory", "abc/**", []probe{
			{"abc", true, false}, {"abc/x", false, true}, {"abc/x/y", false, true}, {"x/abc/y", false, false}}},
		{"middle /**/: zero or more directories", "a/**/b", []probe{
			{"a/b", false, true}, {"a/x/b", false, true}, {"a/x/y/b", false, true}, {"a/x/c", false, false}, {"b", false, false}}},
		{"other consecutive asterisks are one", "a**b", []probe{
			{"ab", false, true}, {"axxb", false, true}, {"a/b", false, false}, {"d/axb", false, true}}},
		{"everything but foo/bar", "/*\n!/foo\n/foo/*\n!/foo/bar", []probe{
			{"foo/bar", false, false}, {"foo/baz", false, true}, {"x", false, true}, {"foo/bar/deep", false, false}}},
		{"negation: the last match decides", "*.log\n!keep.log", []probe{
			{"a.log", false, true}, {"keep.log", false, false}, {"d/keep.log", false, false}}},
		{"no re-including beneath an ignored directory", "build/\n!build/keep", []probe{
			{"build/keep", false, true}, {"build", true, true}}},
		{"comments and blank lines", "# a comment\n\n   \n*.o", []probe{
			{"# a comment", false, false}, {"x.o", false, true}}},
		{"escaped # and !", "\\#foo\n\\!important", []probe{
			{"#foo", false, true}, {"!important", false, true}, {"foo", false, false}}},
		{"trailing spaces dropped unless escaped", "foo  \nbar\\ ", []probe{
			{"foo", false, true}, {"foo ", false, false}, {"bar ", false, true}, {"bar", false, false}}},
		{"? is one character, not a slash", "a?c", []probe{
			{"abc", false, true}, {"aéc", false, true}, {"ac", false, false}, {"abbc", false, false}}},
		{"bracket expressions", "file[0-9].txt\n[!a]*.md\nx[]]y\nz[[:digit:]]", []probe{
			{"file5.txt", false, true}, {"filex.txt", false, false}, {"b.md", false, true}, {"a.md", false, false},
			{"x]y", false, true}, {"z7", false, true}, {"zq", false, false}}},
		{"escaped wildcards are literal", "\\*.c\nq\\?", []probe{
			{"*.c", false, true}, {"x.c", false, false}, {"q?", false, true}, {"qa", false, false}}},
		{"CRLF lines", "*.tmp\r\n", []probe{{"a.tmp", false, true}}},
	} {
		r, err := Parse(tc.rules)
		if err != nil {
			t.Fatalf("%s: Parse(%q): %v", tc.name, tc.rules, err)
		}
		for _, p := range tc.probes {
			if got := r.Match(p.path, p.dir); got != p.ignored {
				t.Errorf("%s: rules %q: Match(%q, dir=%v) = %v, want %v", tc.name, tc.rules, p.path, p.dir, got, p.ignored)
			}
		}
	}
}

// A pattern that cannot mean anything is an error naming it, from the
// config and a .sandboxignore; a .gitignore's is dropped, as git does.
func TestParseErrors(t *testing.T) {
	for _, bad := range []string{"foo[", "a\\", "[[:nope:]]x", "x[!"} {
		_, err := Patterns([]string{"ok", bad})
		if !errors.Is(err, ErrSyntax) || !strings.Contains(err.Error(), bad) {
			t.Errorf("Patterns(%q) = %v, want ErrSyntax naming it", bad, err)
		}
		_, err = Parse("ok\n" + bad + "\n")
		if !errors.Is(err, ErrSyntax) || !strings.Contains(err.Error(), "line 2") {
			t.Errorf("Parse(%q) = %v, want ErrSyntax at line 2", bad, err)
		}
		r, err := ParseLenient("*.o\n" + bad)
		if err != nil || r.Len() != 1 {
			t.Errorf("ParseLenient(%q) = %v, %v; want the good line kept", bad, r.Len(), err)
		}
	}
	if _, err := Patterns([]string{"a\nb"}); !errors.Is(err, ErrSyntax) {
		t.Errorf("a pattern with a line break: %v, want ErrSyntax", err)
	}
	if _, err := Parse(strings.Repeat("x\n", MaxRulesBytes/2+1)); !errors.Is(err, ErrTooLarge) {
		t.Errorf("rules past the cap: %v, want ErrTooLarge", err)
	}
}

// The defaults apply only where the project's .gitignore ignores the
// path too; the project's own rules apply alone.
func TestProject(t *testing.T) {
	git, _ := Parse("__pycache__/\n*.pyc\nbuild/\n")
	own, _ := Patterns([]string{"*.log"})
	p := NewProject(own, git)
	for _, pr := range []probe{
		{"__pycache__", true, true}, {"pkg/__pycache__/m.cpython-311.pyc", false, true}, {"m.pyc", false, true},
		{"build/out", false, false}, // the .gitignore's own rules are not ours
		{"node_modules/.cache/x", false, false}, {"a.log", false, true}, {"mod.py", false, false},
	} {
		if got := p.Match(pr.path, pr.dir); got != pr.ignored {
			t.Errorf("Match(%q) = %v, want %v", pr.path, got, pr.ignored)
		}
	}
	if all, _ := Parse("*\n"); all.Match(".", true) || all.Match("", true) || !all.Match("x", false) {
		t.Error(`"*" leaves out the project's top, or not what is in it`)
	}
	if p := NewProject(nil, nil); p.Match("__pycache__", true) || !p.Empty() {
		t.Error("no .gitignore: no default applies")
	}
}

// Matching stays bounded whatever a sandbox or an owner writes: as many
// patterns as a file may hold, each full of `*` and `**`, against paths
// as deep as Linux allows, stop at MaxWork steps (ErrTooComplex) in well
// under a second here; a real change list spends a small part of it.
func TestMatchBounded(t *testing.T) {
	var rules []string
	for range MaxRules {
		rules = append(rules, "**/a*a*a*b/**/a/**/a*c/**")
	}
	r, err := Parse(strings.Join(rules, "\n"))
	if err != nil {
		t.Fatal(err)
	}
	deep := strings.Repeat("a/", MaxPathBytes/2-1) + "x"
	start := time.Now()
	p := NewProject(r, nil)
	for i := range 200 {
		p.Match(deep[:len(deep)-2*i], i%2 == 0)
	}
	if d := time.Since(start); d > 20*time.Second || !errors.Is(p.Err(), ErrTooComplex) {
		t.Fatalf("200 deep paths against %d costly patterns: %v, %v; want ErrTooComplex, soon", MaxRules, d, p.Err())
	}
	t.Logf("%d costly patterns against paths 2047 deep: ErrTooComplex after %v", MaxRules, time.Since(start))

	git, _ := Parse("__pycache__/\n*.py[cod]\n**/.pytest_cache/**\ndocs/_build/\n/dist/\n*.egg-info/\n")
	p = NewProject(nil, git)
	for i := range 10000 {
		p.Match(fmt.Sprintf("pkg%d/sub%d/mod/__pycache__/m%d.cpython-311.pyc", i%50, i%7, i), false)
	}
	if p.Err() != nil || MaxWork-p.work.left > MaxWork/100 {
		t.Errorf("10,000 paths against a Python .gitignore: %d steps, %v", MaxWork-p.work.left, p.Err())
	}
	if _, err := Parse(strings.Repeat("x\n", MaxRules+1)); !errors.Is(err, ErrTooLarge) {
		t.Errorf("%d patterns: %v, want ErrTooLarge", MaxRules+1, err)
	}
	if _, err := Patterns([]string{strings.Repeat("a/", MaxSegments) + "b"}); !errors.Is(err, ErrSyntax) {
		t.Errorf("a pattern of %d segments: %v, want ErrSyntax", MaxSegments+1, err)
	}
	if r.Match(strings.Repeat("a", MaxPathBytes+1), false) {
		t.Error("a path past MaxPathBytes matched")
	}
}
