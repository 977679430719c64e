package cowfstest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/sandboxd/sandboxd/cowfs"
)

// forkOutlivesSource checks what a fork asks of a pool: writable
// snapshots (clones) of a read-only snapshot of a writable volume, and a
// read-only snapshot of a read-only one (the fork's base), keep their
// files while the source, its base and the read-only snapshot are
// deleted; each order of the deletes works (a delete refused as busy,
// where the backend has no IndependentSnapshots, works once the volume's
// own snapshots are gone); and once all are deleted nothing is left in
// the pool (Pool.Leftovers).
func forkOutlivesSource(t *testing.T, p Pool) {
	fill(t, p.Project.Path)
	orders := [][]string{
		{"ro", "src", "base", "c1", "fb", "c2"}, // a fork's: its snapshot, then the source, then the forks
		{"c1", "c2", "ro", "src", "base", "fb"}, // the forks first
		{"src", "base", "ro", "fb", "c2", "c1"}, // the source before its snapshot
		{"fb", "base", "c2", "ro", "c1", "src"},
	}
	for i, order := range orders {
		vols := map[string]cowfs.Volume{}
		name := func(role string) string { return fmt.Sprintf("%s%d", role, i) }
		vols["base"] = ok[cowfs.Volume](t)(p.Backend.Snapshot(ctx, p.Project, name("base"), true))
		vols["src"] = ok[cowfs.Volume](t)(p.Backend.Snapshot(ctx, vols["base"], name("src"), false))
		write(t, filepath.Join(vols["src"].Path, "built"), "before the fork\n", 0o644)
		syncFS(t, vols["src"].Path)
		vols["ro"] = ok[cowfs.Volume](t)(p.Backend.Snapshot(ctx, vols["src"], name("ro"), true))
		vols["fb"] = ok[cowfs.Volume](t)(p.Backend.Snapshot(ctx, vols["base"], name("fb"), true))
		for _, c := range []string{"c1", "c2"} {
			vols[c] = ok[cowfs.Volume](t)(p.Backend.Snapshot(ctx, vols["ro"], name(c), false))
			write(t, filepath.Join(vols[c].Path, "mine"), c+"\n", 0o644)
		}
		write(t, filepath.Join(vols["src"].Path, "built"), "after the fork\n", 0o644)
		want := map[string]map[string]string{
			"c1": {"built": "before the fork\n", "mine": "c1\n", "README": "a project\n"},
			"c2": {"built": "before the fork\n", "mine": "c2\n", "README": "a project\n"},
			"fb": {"README": "a project\n"},
		}
		deleted := map[string]bool{}
		for pending := order; len(pending) > 0; {
			var busy []string
			for _, role := range pending {
				err := p.Backend.Delete(ctx, vols[role])
				if errors.Is(err, cowfs.ErrBusy) && !p.Backend.Info().Capabilities.IndependentSnapshots {
					busy = append(busy, role)
					continue
				}
				if err != nil {
					t.Fatalf("order %v: deleting %s: %v", order, role, err)
				}
				deleted[role] = true
				for c, files := range want {
					if deleted[c] {
						continue
					}
					for f, content := range files {
						if got, err := os.ReadFile(filepath.Join(vols[c].Path, f)); err != nil || string(got) != content {
							t.Fatalf("order %v: after deleting %s, %s's %s holds %q, %v; want %q", order, role, c, f, got, err, content)
						}
					}
					if _, err := p.Backend.Get(ctx, name(c)); err != nil {
						t.Fatalf("order %v: after deleting %s, %s: %v", order, role, c, err)
					}
				}
				if _, err := p.Backend.Get(ctx, name(role)); !errors.Is(err, cowfs.ErrNotFound) {
					t.Fatalf("order %v: Get(%s) after its delete: %v; want ErrNotFound", order, role, err)
				}
			}
			if slices.Equal(busy, pending) {
				t.Fatalf("order %v: %v stay busy", order, busy)
			}
			pending = busy
		}
		if vols := ok[[]cowfs.Volume](t)(p.Backend.List(ctx)); len(vols) != 0 {
			t.Fatalf("order %v: volumes left: %v", order, names(vols))
		}
		if p.Leftovers != nil {
			if left := p.Leftovers(t); len(left) != 0 {
				t.Fatalf("order %v: left in the pool after every delete: %v", order, left)
			}
		}
	}
}
