package state_test

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/supervisor/state"
)

func TestMain(m *testing.M) {
	if path := os.Getenv("STATE_TEST_WRITER"); path != "" {
		os.Exit(writer(path))
	}
	os.Exit(m.Run())
}

// writer updates one record in a loop until it is killed, printing each
// generation it committed.
func writer(path string) int {
	s, err := state.Open(path, time.Second)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	for gen := 1; ; gen++ {
		_, err := s.Update("sb1", func(r *state.Record) error {
			r.Profile = strconv.Itoa(gen)
			r.Limits = []byte(fmt.Sprintf(`{"pad":%q}`, strings.Repeat("x", gen%4096)))
			return nil
		})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		fmt.Println(gen)
	}
}

func open(t *testing.T, path string) *state.Store {
	t.Helper()
	s, err := state.Open(path, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestRecordsRoundTrip(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "state.db"))
	now := time.Now().UTC().Truncate(time.Second)
	r := state.Record{ID: "a1", Project: "web", Owner: 1000, State: state.Creating, Volume: "sb-a1", Created: now}
	if err := s.Create(r); err != nil {
		t.Fatal(err)
	}
	if err := s.Create(r); !errors.Is(err, state.ErrExists) {
		t.Fatalf("second Create: %v; want ErrExists", err)
	}
	if _, err := s.Update("a1", func(r *state.Record) error { r.State = state.Ready; return nil }); err != nil {
		t.Fatal(err)
	}
	_, err := s.Update("a1", func(r *state.Record) error {
		r.State = state.Destroying
		return errors.New("the filesystem said no")
	})
	if err == nil || !strings.Contains(err.Error(), "said no") {
		t.Fatalf("failed update: %v", err)
	}
	got, err := s.Get("a1")
	if err != nil || got.State != state.Ready || got.Owner != 1000 || !got.Created.Equal(now) {
		t.Fatalf("Get after a failed update = %+v, %v; want the ready record", got, err)
	}
	if err := s.Create(state.Record{ID: "b2", Created: now.Add(time.Second)}); err != nil {
		t.Fatal(err)
	}
	list, err := s.List()
	if err != nil || len(list) != 2 || list[0].ID != "a1" || list[1].ID != "b2" {
		t.Fatalf("List = %v, %v", list, err)
	}
	if err := s.Delete("a1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get("a1"); !errors.Is(err, state.ErrNotFound) {
		t.Fatalf("Get after Delete: %v; want ErrNotFound", err)
	}
	if err := s.Delete("a1"); !errors.Is(err, state.ErrNotFound) {
		t.Fatalf("second Delete: %v; want ErrNotFound", err)
	}
}

func TestASecondDaemonIsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	open(t, path)
	if _, err := state.Open(path, 100*time.Millisecond); !errors.Is(err, state.ErrLocked) {
		t.Fatalf("second Open: %v; want ErrLocked", err)
	}
}

func TestACorruptOrMissingDatabaseIsRebuilt(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.db")
	s := open(t, path)
	for _, id := range []string{"a1", "b2", "c3"} {
		if err := s.Create(state.Record{ID: id, Project: "web", State: state.Ready, Created: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Update("b2", func(r *state.Record) error { r.Owner = 1000; return nil }); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete("c3"); err != nil {
		t.Fatal(err)
	}
	s.Close()

	// Corrupt: overwritten with garbage.
	garbage := []byte(strings.Repeat("not a database ", 1000))
	if err := os.WriteFile(path, garbage, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := state.Open(path, 100*time.Millisecond)
	if err != nil {
		t.Fatalf("Open of a corrupt database: %v; want it rebuilt", err)
	}
	rec := s.Recovery()
	if rec.Rebuilt != 2 || !strings.HasPrefix(rec.CorruptMovedTo, path+".corrupt-") {
		t.Fatalf("Recovery = %+v; want 2 records rebuilt and the corrupt file moved aside", rec)
	}
	if data, _ := os.ReadFile(rec.CorruptMovedTo); string(data) != string(garbage) {
		t.Fatal("the corrupt database was not kept as it was")
	}
	if b2, err := s.Get("b2"); err != nil || b2.Owner != 1000 {
		t.Fatalf("b2 after the rebuild: %+v, %v; want its last update", b2, err)
	}
	if _, err := s.Get("c3"); !errors.Is(err, state.ErrNotFound) {
		t.Fatalf("c3, deleted before the corruption, after the rebuild: %v", err)
	}
	s.Close()

	// Missing: deleted.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	s = open(t, path)
	if list, err := s.List(); err != nil || len(list) != 2 || s.Recovery().Rebuilt != 2 {
		t.Fatalf("after the database went missing: %v, %v, %+v", list, err, s.Recovery())
	}
}

func TestKill9LeavesEveryRecordWhole(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	s := open(t, path)
	if err := s.Create(state.Record{ID: "sb1", State: state.Ready, Created: time.Now()}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	for trial := 0; trial < 5; trial++ {
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), "STATE_TEST_WRITER="+path)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(out)
		last := 0
		for sc.Scan() {
			last, _ = strconv.Atoi(sc.Text())
			if last >= 20*(trial+1) {
				break
			}
		}
		_ = cmd.Process.Signal(syscall.SIGKILL)
		for sc.Scan() { // what it printed before dying was committed too
			last, _ = strconv.Atoi(sc.Text())
		}
		_ = cmd.Wait()

		s, err := state.Open(path, time.Second)
		if err != nil {
			t.Fatalf("trial %d: reopening after kill -9: %v", trial, err)
		}
		r, err := s.Get("sb1")
		s.Close()
		if err != nil {
			t.Fatalf("trial %d: the record after kill -9: %v", trial, err)
		}
		gen, _ := strconv.Atoi(r.Profile)
		// Committed generations were printed; the one in flight may or may
		// not have landed, never half.
		if gen < last || gen > last+1 {
			t.Fatalf("trial %d: record at generation %d after the writer reported %d", trial, gen, last)
		}
	}
}
