package promote

import (
	"slices"
	"strings"

	"github.com/sandboxd/sandboxd/cowfs"
)

// Conflict is a path that a sandbox and its target both changed since the
// sandbox's base.
type Conflict struct {
	Path    string
	Sandbox cowfs.ChangeKind // what the sandbox did to it (or to a directory above it)
	Target  cowfs.ChangeKind // what the target did
}

// Conflicts lists the paths that both change sets touch: the same path,
// or a path below one the other side deleted or renamed away. What does
// not count:
//   - a directory's own entry modified, on either side: adding a file to
//     a directory changes the directory's times, and two sides adding
//     different files to one directory do not conflict;
//   - the target's metadata-only changes: a host that reads the project
//     changes access times, which is no one's edit (the sandbox's
//     metadata wins where it changed the same path).
func Conflicts(sandbox, target []cowfs.Change) []Conflict {
	type touch struct {
		kind   cowfs.ChangeKind
		gone   bool // deleted, or renamed away: what is below it goes too
		isDir  bool
		ignore bool
	}
	touches := func(changes []cowfs.Change, isTarget bool) map[string]touch {
		m := map[string]touch{}
		for _, c := range changes {
			t := touch{kind: c.Kind, isDir: c.Type == cowfs.TypeDir}
			t.ignore = t.isDir && (c.Kind == cowfs.Modified || c.Kind == cowfs.Metadata) ||
				isTarget && c.Kind == cowfs.Metadata
			switch c.Kind {
			case cowfs.Deleted:
				t.gone = true
			case cowfs.Renamed:
				m[c.Path] = touch{kind: c.Kind, gone: true, isDir: t.isDir}
				m[c.NewPath] = touch{kind: c.Kind, isDir: t.isDir}
				continue
			}
			if old, ok := m[c.Path]; ok && !old.ignore {
				continue // keep the first real change of a path
			}
			m[c.Path] = t
		}
		return m
	}
	sb, tg := touches(sandbox, false), touches(target, true)
	var out []Conflict
	seen := map[string]bool{}
	add := func(p string, s, t cowfs.ChangeKind) {
		if !seen[p] {
			seen[p] = true
			out = append(out, Conflict{Path: p, Sandbox: s, Target: t})
		}
	}
	for p, s := range sb {
		if s.ignore {
			continue
		}
		if t, ok := tg[p]; ok && !t.ignore {
			add(p, s.kind, t.kind)
			continue
		}
		// A path below one the target removed, or above what it changed
		// when the sandbox removed this one.
		for q := parent(p); q != ""; q = parent(q) {
			if t, ok := tg[q]; ok && t.gone {
				add(p, s.kind, t.kind)
				break
			}
		}
	}
	for p, t := range tg {
		if t.ignore || seen[p] {
			continue
		}
		for q := parent(p); q != ""; q = parent(q) {
			if s, ok := sb[q]; ok && s.gone {
				add(p, s.kind, t.kind)
				break
			}
		}
	}
	slices.SortFunc(out, func(a, b Conflict) int { return strings.Compare(a.Path, b.Path) })
	return out
}

// parent is p's directory, "" at the top.
func parent(p string) string {
	i := strings.LastIndexByte(p, '/')
	if i < 0 {
		return ""
	}
	return p[:i]
}
