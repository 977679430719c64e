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
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, rules, path string) {
		r, err := Parse(rules)
		if err != nil {
			return
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
