package config

import (
	"github.com/BurntSushi/toml"

	"github.com/sandboxd/sandboxd/internal/ignore"
)

// MaxProjectIgnore bounds a project's ignore patterns.
const MaxProjectIgnore = 256

// projectIgnore checks project i's ignore patterns, each on its own: a
// bad one is named, with its line.
func (v *validator) projectIgnore(i int, p Project) {
	arr := toml.Key{"project"}
	key := elemName(arr, i, toml.Key{"ignore"})
	if len(p.Ignore) > MaxProjectIgnore {
		v.add(v.projectLine(i, "ignore"), key, nil, "%s has %d patterns: at most %d", key, len(p.Ignore), MaxProjectIgnore)
		return
	}
	lines := v.w.itemLines(arr, i, toml.Key{"ignore"}, len(p.Ignore))
	for j, pat := range p.Ignore {
		if _, err := ignore.Patterns([]string{pat}); err != nil {
			v.add(lines[j], key, err, "%s: %v; write it in gitignore syntax (close each '[', write a last '\\' as '\\\\')", key, err)
		}
	}
}
