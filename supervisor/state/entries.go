package state

import (
	"encoding/json"
	"slices"
	"strings"
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
	// Pool: a warm pool's sandbox, not yet claimed (Record.Pool).
	Pool bool
}

func entryOf(r Record) Entry {
	e := Entry{ID: r.ID, Name: r.Name, Project: r.Project, Owner: r.Owner, State: r.State, Created: r.Created, Limits: r.Limits, Pool: r.Pool}
	if r.IDs != nil {
		e.IDBase, e.HasIDs = r.IDs.Base, true
	}
	return e
}

// Entries returns every record's entry, oldest first, as List would.
func (s *Store) Entries() []Entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.entries)
}

// loadEntries fills the entries from the database, at Open.
func (s *Store) loadEntries() error {
	recs, err := s.List()
	if err != nil {
		return err
	}
	s.entries = make([]Entry, 0, len(recs))
	for _, r := range recs {
		s.entries = append(s.entries, entryOf(r)) // List's order already
	}
	return nil
}

// setEntry and dropEntry follow a committed change. The entries stay in
// List's order (by creation, then id), a new one put in its place: no
// sort per create with a thousand of them.
func (s *Store) setEntry(r Record) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.remove(r.ID)
	e := entryOf(r)
	i, _ := slices.BinarySearchFunc(s.entries, e, compareEntries)
	s.entries = slices.Insert(s.entries, i, e)
}

func (s *Store) dropEntry(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.remove(id)
}

// remove takes id's entry out, if there is one; s.mu is held.
func (s *Store) remove(id string) {
	if i := slices.IndexFunc(s.entries, func(e Entry) bool { return e.ID == id }); i >= 0 {
		s.entries = slices.Delete(s.entries, i, i+1)
	}
}

func compareEntries(a, b Entry) int {
	if c := a.Created.Compare(b.Created); c != 0 {
		return c
	}
	return strings.Compare(a.ID, b.ID)
}
