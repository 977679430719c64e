package audit

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func entries(t *testing.T, path string) []Entry {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []Entry
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var e Entry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("%q: %v", sc.Text(), err)
		}
		out = append(out, e)
	}
	return out
}

// A caller's refusals past its budget are counted, not written; its
// actions, root's and the daemon's lines are all written; one LeftOut
// line says what was left out, by action and result; the budget refills.
func TestABudgetCountsACallersRefusalsPastIt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	l, err := OpenWith(path, Options{Budget: Budget{RefusedLines: 10, Interval: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l.now = func() time.Time { return clock }
	member, other, root := uint32(1000), uint32(1001), uint32(0)
	long := "/" + strings.Repeat("x", 8000)
	rec := func(uid *uint32, action, result string, refused bool) {
		t.Helper()
		e := Entry{CallerUID: uid, Action: action, Result: result, Refused: refused, Command: long}
		if result != "ok" {
			e.Error = "reading " + long + ": no such file"
		}
		if err := l.Record(e); err != nil {
			t.Fatal(err)
		}
	}
	rec(&member, "write-file", "ok", false) // before the flood
	for range 500 {
		rec(&member, "read-file", "error", true)
	}
	for range 3 {
		rec(&member, "list-files", "error", false) // failed, not refused
	}
	rec(&member, "exec", "ok", false) // its actions have their own budget
	rec(&other, "read-file", "error", true)
	rec(&root, "read-file", "error", true)
	// Two actions of 4 KiB each, 16 refusals and errors of under 1 KiB.
	if fi, _ := os.Stat(path); fi.Size() > 32*1024 {
		t.Fatalf("the log grew to %d bytes", fi.Size())
	}
	for range 500 {
		rec(nil, "expire", "ok", false)
	}
	if err := l.FlushLeftOut(); err != nil {
		t.Fatal(err)
	}
	var refused, oks, others, roots, daemon int
	var left *LeftOut
	for _, e := range entries(t, path) {
		switch {
		case e.LeftOut != nil:
			if left != nil || e.CallerUID == nil || *e.CallerUID != member || e.Action != LeftOutAction {
				t.Fatalf("LeftOut line %+v: want one, of uid %d", e, member)
			}
			left = e.LeftOut
		case e.CallerUID == nil:
			daemon++
		case *e.CallerUID == root:
			roots++
		case *e.CallerUID == other:
			others++
		case e.Result == "ok":
			oks++
		default:
			refused++
			if len(e.Error) > RefusedField || len(e.Command) > RefusedField {
				t.Fatalf("a refusal's fields: %d and %d bytes; want at most %d", len(e.Error), len(e.Command), RefusedField)
			}
		}
	}
	if refused != 10 || oks != 2 || others != 1 || roots != 1 || daemon != 500 {
		t.Fatalf("written: %d of the member's refusals and errors (want 10), %d of its actions (want 2), %d of another's, %d of root's, %d of the daemon's",
			refused, oks, others, roots, daemon)
	}
	want := []LeftOutCount{{"list-files", "error", 3}, {"read-file", "refused", 490}}
	if left == nil || left.Lines != 493 || len(left.By) != 2 || left.By[0] != want[0] || left.By[1] != want[1] {
		t.Fatalf("left out: %+v; want 493 lines, %v", left, want)
	}

	// Half an interval later, half the budget is back.
	clock = clock.Add(30 * time.Second)
	for range 20 {
		rec(&member, "read-file", "error", true)
	}
	if err := l.FlushLeftOut(); err != nil {
		t.Fatal(err)
	}
	es := entries(t, path)
	last := es[len(es)-1]
	if last.LeftOut == nil || last.LeftOut.Lines != 15 {
		t.Fatalf("after half an interval, the last line: %+v; want 15 of 20 left out", last)
	}
}

// The LeftOut line is written at the interval's end by itself, with no
// further call.
func TestTheLeftOutLineComesAtTheIntervalsEnd(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	l, err := OpenWith(path, Options{Budget: Budget{RefusedLines: 1, Interval: 200 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	uid := uint32(1000)
	for range 5 {
		if err := l.Record(Entry{CallerUID: &uid, Action: "read-file", Result: "error", Refused: true}); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		es := entries(t, path)
		if last := es[len(es)-1]; last.LeftOut != nil {
			if last.LeftOut.Lines != 4 {
				t.Fatalf("LeftOut %+v; want 4 lines", last.LeftOut)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no LeftOut line 30 s after an interval of 200 ms: %+v", es)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
