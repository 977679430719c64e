package state

import (
	"encoding/json"
	"sort"
	"time"
)

// Entry is what a create's admission reads of every record (names,
// counts, memory promised, id blocks), and what a listing shows. The Store keeps the entries in
// memory beside the database, so that a create does not decode every
// record: with 1,000 sandboxes that took most of a create's time.
type Entry struct {
	ID, Name, Project string
	Owner             uint32
	State             State
	Created           time.Time
	Limits            json.RawMessage // as in the record
	// IDBase is the first of the sandbox's block of host ids, if it has
	// a user namespace (HasIDs).
	IDBase uint32
	HasIDs bool
}

func entryOf(r Record) Entry {
	e := Entry{ID: r.ID, Name: r.Name, Project: r.Project, Owner: r.Owner, State: r.State, Created: r.Created, Limits: r.Limits}
	if r.IDs != nil {
		e.IDBase, e.HasIDs = r.IDs.Base, true
	}
	return e
}

// Entries returns every record's entry, oldest first, as List would.
func (s *Store) Entries() []Entry {
	s.mu.Lock()
	out := make([]Entry, 0, len(s.entries))
	for _, e := range s.entries {
		out = append(out, e)
	}
	s.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Created.Before(out[j].Created) })
	return out
}

// loadEntries fills the entries from the database, at Open.
func (s *Store) loadEntries() error {
	recs, err := s.List()
	if err != nil {
		return err
	}
	s.entries = make(map[string]Entry, len(recs))
	for _, r := range recs {
		s.entries[r.ID] = entryOf(r)
	}
	return nil
}

// setEntry and dropEntry follow a committed change.
func (s *Store) setEntry(r Record) {
	s.mu.Lock()
	s.entries[r.ID] = entryOf(r)
	s.mu.Unlock()
}

func (s *Store) dropEntry(id string) {
	s.mu.Lock()
	delete(s.entries, id)
	s.mu.Unlock()
}
