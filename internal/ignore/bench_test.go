package ignore

import (
	"fmt"
	"strings"
	"testing"
)

// A Python project's .gitignore (GitHub's template, about 60 patterns)
// against a change list of 10,000 paths, 5 deep.
func BenchmarkProjectMatch(b *testing.B) {
	var lines []string
	for i := range 60 {
		lines = append(lines, fmt.Sprintf("*.ext%d", i), fmt.Sprintf("/build%d/", i))
	}
	lines = append(lines, "__pycache__/", "*.py[cod]", "**/.pytest_cache/**", "docs/_build/")
	git, err := Parse(strings.Join(lines, "\n"))
	if err != nil {
		b.Fatal(err)
	}
	var paths []string
	for i := range 10000 {
		paths = append(paths, fmt.Sprintf("pkg%d/sub%d/mod/__pycache__/m%d.cpython-311.pyc", i%50, i%7, i))
	}
	b.ResetTimer()
	for b.Loop() {
		p := NewProject(nil, git)
		for _, path := range paths {
			p.Match(path, false)
		}
		b.ReportMetric(float64(MaxWork-p.work.left), "steps")
	}
}
