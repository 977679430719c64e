package audit_test

import (
	"path/filepath"
	"testing"

	"github.com/sandboxd/sandboxd/supervisor/audit"
)

// An observer hears every entry, also those its caller's budget leaves
// out of the file; nil stops it.
func TestObserveHearsEveryEntryEvenLeftOut(t *testing.T) {
	l, err := audit.OpenWith(filepath.Join(t.TempDir(), "audit.log"), audit.Options{Budget: audit.Budget{Lines: 2}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var heard []string
	l.Observe(func(e audit.Entry) { heard = append(heard, e.Action+"/"+e.Result) })
	uid := uint32(1000)
	for range 5 {
		if err := l.Record(audit.Entry{CallerUID: &uid, Action: "exec", Result: "ok"}); err != nil {
			t.Fatal(err)
		}
	}
	if len(heard) != 5 || heard[0] != "exec/ok" {
		t.Fatalf("heard %q, want 5 exec/ok", heard)
	}
	l.Observe(nil)
	_ = l.Record(audit.Entry{Action: "create", Result: "ok"})
	if len(heard) != 5 {
		t.Fatalf("heard %d entries after Observe(nil), want 5", len(heard))
	}
	var none *audit.Log
	none.Observe(func(audit.Entry) {}) // a nil log hears nothing, and does not panic
}
