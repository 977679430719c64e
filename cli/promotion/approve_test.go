package promotion

import (
	"testing"

	"github.com/sandboxd/sandboxd/sandboxd1"
)

// TestChangeSummarySaysWhatChanged: the count with its plural right,
// what happened to which path (names escaped), and how many more.
func TestChangeSummarySaysWhatChanged(t *testing.T) {
	for _, c := range []struct {
		p    sandboxd1.Promotion
		want string
	}{
		{sandboxd1.Promotion{Changes: 1, Changed: []sandboxd1.ChangedPath{{Kind: "modified", Path: "calc.py"}}}, "1 change: modified calc.py"},
		{sandboxd1.Promotion{Changes: 0}, "0 changes"},
		{sandboxd1.Promotion{Changes: 2, Changed: []sandboxd1.ChangedPath{{Kind: "renamed", Path: "a", NewPath: "b"}, {Kind: "metadata", Path: "run.sh"}}},
			"2 changes: renamed a -> b, metadata of run.sh"},
		{sandboxd1.Promotion{Changes: 1, Changed: []sandboxd1.ChangedPath{{Kind: "added", Path: "esc\x1b[2J\nFAKE"}}}, `1 change: added "esc\033[2J\nFAKE"`},
		{sandboxd1.Promotion{Changes: 30, Changed: []sandboxd1.ChangedPath{
			{Kind: "added", Path: "f1"}, {Kind: "added", Path: "f2"}, {Kind: "added", Path: "f3"},
			{Kind: "added", Path: "f4"}, {Kind: "deleted", Path: "f5"}, {Kind: "added", Path: "f6"}}},
			"30 changes: added f1, added f2, added f3, added f4, deleted f5 and 25 more"},
	} {
		if got := changeSummary(c.p); got != c.want {
			t.Errorf("changeSummary(%+v) = %q; want %q", c.p.Changed, got, c.want)
		}
	}
}
