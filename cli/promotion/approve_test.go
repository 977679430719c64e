package promotion

import (
	"strings"
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

// TestUnseenWarnsOfWhatTheDiffDoesNotShow: a diff that shows the whole
// change warns of nothing; one with a file's content not shown (a mode
// only the requester may read) or cut at its bound says the approval
// covers what is not shown too; a file's content line that says so
// (prefixed, as a diff prefixes content) is no such line.
func TestUnseenWarnsOfWhatTheDiffDoesNotShow(t *testing.T) {
	whole := "diff --git a/calc.py b/calc.py\n--- a/calc.py\n+++ b/calc.py\n@@ -1 +1 @@\n-x\n+Content not shown: fake\n+... the diff is cut here\n"
	if got := unseen(whole); got != "" {
		t.Errorf("a whole diff: %q; want no warning", got)
	}
	hidden := whole + "diff --git a/run.sh b/run.sh\nnew file mode 100600\nContent not shown: b/run.sh is not readable by uid 1001\n"
	if got := unseen(hidden); !strings.Contains(got, "the content of 1 file not shown to you") || strings.Contains(got, "cut") {
		t.Errorf("a file's content not shown: %q", got)
	}
	cut := hidden + "... the diff is cut here: it is longer than 33554432 bytes\n"
	if got := unseen(cut); !strings.Contains(got, "1 file not shown") || !strings.Contains(got, "cut before its end") || !strings.Contains(got, "approval") {
		t.Errorf("a diff cut: %q", got)
	}
}
