package promote

import (
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/sandboxd/sandboxd/cowfs"
)

// steps is Apply's plan: what to remove, write and touch, in order.
type steps struct {
	unput  []string // Restore's: entries as the promotion wrote them, deepest first
	remove []string
	put    []putStep
	meta   []string
}

type putStep struct {
	path string
	tree bool // the whole tree below it too (a renamed directory)
}

// plan orders a change list into Apply's steps.
func plan(changes []cowfs.Change) (steps, error) {
	var p steps
	metaSeen := map[string]bool{}
	addMeta := func(path string) {
		if !metaSeen[path] {
			metaSeen[path] = true
			p.meta = append(p.meta, path)
		}
	}
	for _, c := range changes {
		if err := checkRel(c.Path); err != nil {
			return p, fmt.Errorf("applying changes: %w", err)
		}
		if c.Kind == cowfs.Renamed {
			if err := checkRel(c.NewPath); err != nil {
				return p, fmt.Errorf("applying changes: %w", err)
			}
		}
		if c.Path == "." && (c.Kind == cowfs.Deleted || c.Kind == cowfs.Renamed) {
			// The root itself is only ever changed, never removed.
			return p, fmt.Errorf("applying changes: the root cannot be %s: %w", c.Kind, ErrUnsafePath)
		}
		switch c.Kind {
		case cowfs.Deleted:
			p.remove = append(p.remove, c.Path)
		case cowfs.Renamed:
			p.remove = append(p.remove, c.Path)
			p.put = append(p.put, putStep{path: c.NewPath, tree: c.Type == cowfs.TypeDir})
			if c.Type == cowfs.TypeDir {
				addMeta(c.NewPath)
			}
		case cowfs.Added, cowfs.Modified:
			if c.Type == cowfs.TypeDir {
				// A directory's own entry: its children are changes of
				// their own; its times are set once they are written.
				p.put = append(p.put, putStep{path: c.Path})
				addMeta(c.Path)
				continue
			}
			p.put = append(p.put, putStep{path: c.Path})
		case cowfs.Metadata:
			addMeta(c.Path)
		default:
			return p, fmt.Errorf("applying changes: %s: unknown kind of change %q", c.Path, c.Kind)
		}
	}
	// A path removed and put again (replaced by another inode) is removed
	// first: removals all go before any write.
	slices.SortStableFunc(p.remove, func(a, b string) int { return depth(b) - depth(a) })
	slices.SortStableFunc(p.put, func(a, b putStep) int { return depth(a.path) - depth(b.path) })
	slices.SortStableFunc(p.meta, func(a, b string) int { return depth(b) - depth(a) })
	return p, nil
}

func depth(p string) int { return strings.Count(p, "/") }

// checkRel refuses a change's path that is not a plain relative path.
func checkRel(p string) error {
	if p == "" || strings.HasPrefix(p, "/") || path.Clean(p) != p || p == ".." || strings.HasPrefix(p, "../") {
		return fmt.Errorf("%q is not a path inside the tree: %w", p, ErrUnsafePath)
	}
	return nil
}
