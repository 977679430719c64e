package ignore

import (
	"strings"
	"testing"
)

// FuzzMatch: no rules text or path panics or hangs Parse and Match, and
// what is beneath an ignored directory is ignored.
func FuzzMatch(f *testing.F) {
	for _, s := range [][2]string{
		{"__pycache__/\n*.pyc", "pkg/__pycache__/m.pyc"},
		{"/*\n!/foo\n/foo/*\n!/foo/bar", "foo/bar"},
		{"a/**/b\nabc/**", "a/x/y/b"},
		{"[!a-c[:digit:]]?\\*", "d1*"},
		{"\\#x \\ \n!\\!y", "#x  "},
		{"**/**/**", "a/b/c"},
		{"x[", "x["},
		{"a/**\n**/b\na/**/b\n/**/c/**", "a/c/b"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, rules, path string) {
		r, err := Parse(rules)
		if err != nil {
			return
		}
		// The one-"**" shortcut agrees with the general match.
		if trimmed := strings.Trim(path, "/"); trimmed != "" {
			comps := strings.Split(trimmed, "/")
			for i := range r.rules {
				ru := &r.rules[i]
				if ru.anchored && ru.matches(comps, newWork()) != matchSegments(ru.segs, comps, newWork()) {
					t.Fatalf("rule %q on %q: the shortcut says %v", ru.text, path, ru.matches(comps, newWork()))
				}
			}
		}
		p := NewProject(r, r)
		dirs := strings.Count(path, "/")
		for _, dir := range []bool{false, true} {
			got := r.Match(path, dir)
			if p.Match(path, dir) != got {
				t.Fatalf("Project's memo disagrees with Rules on %q", path)
			}
			if got && dir && dirs < 64 {
				if !r.Match(strings.TrimRight(path, "/")+"/child", false) {
					t.Fatalf("rules %q ignore directory %q but not what is beneath", rules, path)
				}
			}
		}
	})
}
