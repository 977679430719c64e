package audit_test

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"sync"
	"testing"

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
