// Package subtree says whether a path is in a directory's tree: the one
// test the daemon's walks share (the change set's renames, adoption's
// checks), so that they agree.
package subtree

import "strings"

// Within says whether path is dir or below it.
func Within(path, dir string) bool {
	return path == dir || strings.HasPrefix(path, strings.TrimSuffix(dir, "/")+"/")
}
