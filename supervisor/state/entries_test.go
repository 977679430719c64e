package state_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/supervisor/state"
)

// The entries a create's admission reads follow every change of the
// records, a failed one not, and are read back from the database when it
// opens again.
func TestEntriesFollowTheRecords(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	s, err := state.Open(path, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Second)
	for i, id := range []string{"b2", "a1", "c3"} {
		r := state.Record{ID: id, Name: "n-" + id, Owner: 1000 + uint32(i), State: state.Creating, Created: now.Add(time.Duration(i) * time.Second)}
		if id == "c3" {
			r.IDs = &state.IDMap{Base: 0xa0000}
		}
		if err := s.Create(r); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Update("a1", func(r *state.Record) error { r.State = state.Ready; return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Update("b2", func(r *state.Record) error { r.State = state.Destroying; return errors.New("no") }); err == nil {
		t.Fatal("a failing update succeeded")
	}
	if err := s.Delete("b2"); err != nil {
		t.Fatal(err)
	}
	check := func(when string, s *state.Store) {
		t.Helper()
		got := s.Entries()
		if len(got) != 2 || got[0].ID != "a1" || got[1].ID != "c3" {
			t.Fatalf("%s: entries %+v; want a1, c3 (oldest first)", when, got)
		}
		if got[0].State != state.Ready || got[0].Name != "n-a1" || got[0].Owner != 1001 || got[0].HasIDs {
			t.Errorf("%s: a1's entry %+v", when, got[0])
		}
		if got[1].State != state.Creating || !got[1].HasIDs || got[1].IDBase != 0xa0000 {
			t.Errorf("%s: c3's entry %+v", when, got[1])
		}
	}
	check("open", s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open(t, path)
	check("opened again", s)
}

// Whatever the order of creates, updates and deletes, the entries are
// the records, in List's order.
func TestEntriesStayInListsOrder(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "state.db"))
	rng := rand.New(rand.NewPCG(1, 2))
	base := time.Now().UTC()
	var ids []string
	for i := range 300 {
		id := fmt.Sprintf("r%03d", i)
		// Times out of order, some equal: ties go by id.
		r := state.Record{ID: id, Owner: uint32(i % 7), Created: base.Add(time.Duration(rng.IntN(50)) * time.Second)}
		if err := s.Create(r); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
		if rng.IntN(3) == 0 {
			victim := ids[rng.IntN(len(ids))]
			if err := s.Delete(victim); err != nil && !errors.Is(err, state.ErrNotFound) {
				t.Fatal(err)
			}
		}
		if rng.IntN(3) == 0 {
			_, _ = s.Update(ids[rng.IntN(len(ids))], func(r *state.Record) error { r.State = state.Ready; return nil })
		}
	}
	list, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	entries := s.Entries()
	if len(entries) != len(list) {
		t.Fatalf("%d entries, %d records", len(entries), len(list))
	}
	for i := range list {
		if entries[i].ID != list[i].ID || entries[i].State != list[i].State || !entries[i].Created.Equal(list[i].Created) {
			t.Fatalf("entry %d is %+v; the record there is %s (%s, %v)", i, entries[i], list[i].ID, list[i].State, list[i].Created)
		}
	}
}
