package state_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/supervisor/state"
)

func TestAddedProjectsAreKeptAndRebuiltFromTheirMirror(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.db")
	s := open(t, path)
	now := time.Now().UTC().Truncate(time.Second)
	for _, p := range []state.Project{{Name: "web2", Location: "/srv/web2", Added: now}, {Name: "data", Location: "tank/data", Added: now}, {Name: "gone", Location: "/srv/gone"}} {
		if err := s.AddProject(p); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.AddProject(state.Project{Name: "data", Location: "tank/other"}); !errors.Is(err, state.ErrProjectExists) {
		t.Fatalf("a second AddProject of data: %v; want ErrProjectExists", err)
	}
	for _, bad := range []string{"", "../x", ".hidden", "a/b"} {
		if err := s.AddProject(state.Project{Name: bad, Location: "/x"}); err == nil {
			t.Fatalf("AddProject(%q) was recorded", bad)
		}
	}
	if err := s.DeleteProject("gone"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteProject("gone"); !errors.Is(err, state.ErrNoProject) {
		t.Fatalf("a second DeleteProject: %v; want ErrNoProject", err)
	}
	want := []state.Project{{Name: "data", Location: "tank/data", Added: now}, {Name: "web2", Location: "/srv/web2", Added: now}}
	check := func(when string, s *state.Store) {
		t.Helper()
		got, err := s.Projects()
		if err != nil || len(got) != len(want) {
			t.Fatalf("Projects %s = %+v, %v; want %+v", when, got, err, want)
		}
		for i := range want {
			if got[i].Name != want[i].Name || got[i].Location != want[i].Location || !got[i].Added.Equal(want[i].Added) {
				t.Fatalf("Projects %s = %+v; want %+v", when, got, want)
			}
		}
	}
	check("before the restart", s)
	s.Close()

	s = open(t, path)
	check("after a restart", s)
	s.Close()

	// The database lost: the mirror brings the projects back, not the
	// deleted one.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	s = open(t, path)
	if r := s.Recovery(); r.Projects != 2 {
		t.Fatalf("Recovery = %+v; want 2 projects rebuilt", r)
	}
	check("after the database was rebuilt", s)
}
