package audit_test

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/sandboxd/sandboxd/supervisor/audit"
)

func TestEntriesAreAppendedWholeAndKept(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log", "audit.log")
	l, err := audit.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	uid := uint32(1000)
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := l.Record(audit.Entry{CallerUID: &uid, Action: "create", Sandbox: "sb" + string(rune('a'+i%26)), Result: "ok"}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	l.Close()
	// A restart appends; it never truncates.
	l, err = audit.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Record(audit.Entry{Action: "expire", Sandbox: "old", Result: "ok"}); err != nil {
		t.Fatal(err)
	}
	l.Close()

	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []audit.Entry
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var e audit.Entry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("line %d is not a whole entry: %q: %v", len(lines)+1, sc.Text(), err)
		}
		lines = append(lines, e)
	}
	if len(lines) != 51 {
		t.Fatalf("%d lines; want 51", len(lines))
	}
	last := lines[50]
	if last.Action != "expire" || last.CallerUID != nil || last.Time.IsZero() {
		t.Fatalf("last entry %+v; want the daemon's own expire", last)
	}
	if lines[0].CallerUID == nil || *lines[0].CallerUID != 1000 {
		t.Fatalf("first entry %+v; want caller 1000", lines[0])
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Fatalf("audit log mode %v; want 0600", st.Mode().Perm())
	}
}

func TestANilLogRecordsNothing(t *testing.T) {
	var l *audit.Log
	if err := l.Record(audit.Entry{Action: "create"}); err != nil {
		t.Fatal(err)
	}
}

func TestRecordTruncatesLongFields(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	l, err := audit.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	long := strings.Repeat("é", 1<<20)
	if err := l.Record(audit.Entry{Action: "exec", Result: "ok", Command: long, Error: long}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > 3*audit.MaxField {
		t.Fatalf("a line of %d bytes; want at most about 2*%d", len(b), audit.MaxField)
	}
	var e audit.Entry
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(e.Command, "... [cut: 2097152 bytes in all]") || !utf8.ValidString(e.Command) || len(e.Command) > audit.MaxField {
		t.Fatalf("command recorded as %d bytes ending %q", len(e.Command), e.Command[max(0, len(e.Command)-40):])
	}
}

// A name a sandbox made reaches `cat audit.log` with no byte a terminal
// acts on, and reads back as it was.
func TestRecordEscapesWhatJSONLeavesRaw(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	l, err := audit.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	name := "x\x1b[2J\u009b31m\u202e\x7fy"
	if err := l.Record(audit.Entry{Action: "exec", Result: "ok", Command: name}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"\x1b", "\u009b", "\u202e", "\x7f"} {
		if strings.Contains(string(b), bad) {
			t.Errorf("the line holds %q raw: %q", bad, b)
		}
	}
	var e audit.Entry
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatal(err)
	}
	if e.Command != name {
		t.Errorf("command read back as %q; want %q", e.Command, name)
	}
}
