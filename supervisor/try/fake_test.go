package try_test

import (
	"context"
	"fmt"
	"github.com/sandboxd/sandboxd/supervisor/commands"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/cowfs/cowfsfake"
	"github.com/sandboxd/sandboxd/runtime/nsinit"
	"github.com/sandboxd/sandboxd/supervisor"
	"github.com/sandboxd/sandboxd/supervisor/hosttest"
	"github.com/sandboxd/sandboxd/supervisor/state"
	"github.com/sandboxd/sandboxd/supervisor/try"
)

// fakeHost is hosttest's Host with what the room asks beyond it (Usage),
// creates that make real volumes of a fake pool and refuse a name taken,
// as the core does, and destroys that may be made to fail.
type fakeHost struct {
	*hosttest.Host
	pool    *cowfsfake.Backend
	project cowfs.Volume

	mu      sync.Mutex
	ids     int
	created []string // names, in the order made
	// failDestroy, if set, is the error of destroying the sandbox named
	// so (nil: it goes).
	failDestroy func(name string) error
}

var _ try.Host = (*fakeHost)(nil)

// newUnit is the room over a fakeHost whose project "web" holds
// index.html, and run as its Runner.
func newUnit(t *testing.T, run commands.Runner) (*try.Try, *fakeHost) {
	t.Helper()
	pool, err := cowfsfake.Open(ctx, filepath.Join(t.TempDir(), "root"))
	if err != nil {
		t.Fatal(err)
	}
	project, err := pool.Create(ctx, "web")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(project.Path, "index.html"), []byte("<h1>web</h1>\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A read-only snapshot's top directory is 0555: what is left goes
	// through the pool, before the temporary directory is removed.
	t.Cleanup(func() {
		vols, _ := pool.List(context.Background())
		for _, v := range vols {
			if err := pool.Delete(context.Background(), v); err != nil {
				t.Errorf("cleaning up volume %s: %v", v.Name, err)
			}
		}
	})
	f := &fakeHost{Host: hosttest.New(t, pool, nil), pool: pool, project: project}
	f.CreateFn = f.create
	return try.New(f, try.Config{Runner: run}), f
}

// create makes a sandbox as the core does, as far as Try sees it: a
// name taken is refused (ErrExists), else a read-only base of the
// project and a writable copy of it, recorded.
func (f *fakeHost) create(ctx context.Context, opts supervisor.CreateOptions) (supervisor.Sandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	recs, err := f.S.List()
	if err != nil {
		return supervisor.Sandbox{}, err
	}
	for _, r := range recs {
		if r.Name == opts.Name {
			return supervisor.Sandbox{}, fmt.Errorf("creating a sandbox of %s: a sandbox named %q exists: %w", opts.Project, opts.Name, supervisor.ErrExists)
		}
	}
	f.ids++
	id := fmt.Sprintf("%012x", f.ids)
	base, err := f.pool.Snapshot(ctx, f.project, "base-"+id, true)
	if err != nil {
		return supervisor.Sandbox{}, err
	}
	vol, err := f.pool.Snapshot(ctx, base, "sb-"+id, false)
	if err != nil {
		return supervisor.Sandbox{}, err
	}
	rec := state.Record{ID: id, Name: opts.Name, Project: opts.Project, Owner: opts.Owner, State: state.Ready,
		Base: base.Name, Volume: vol.Name, Unit: "sandbox-" + id + ".scope", Created: time.Now().UTC()}
	if err := f.S.Create(rec); err != nil {
		return supervisor.Sandbox{}, err
	}
	f.created = append(f.created, opts.Name)
	return supervisor.Sandbox{Record: rec, Path: vol.Path}, nil
}

func (f *fakeHost) Destroy(ctx context.Context, id string) error {
	rec, err := f.S.Get(id)
	if err != nil {
		return err
	}
	if f.failDestroy != nil {
		if err := f.failDestroy(rec.Name); err != nil {
			return err
		}
	}
	if err := f.Host.Destroy(ctx, id); err != nil {
		return err
	}
	// The core deletes a destroyed sandbox's volumes too.
	for _, name := range []string{rec.Volume, rec.Base} {
		if v, err := f.pool.Get(ctx, name); err == nil {
			if err := f.pool.Delete(ctx, v); err != nil {
				return err
			}
		}
	}
	return nil
}

// Usage is what the core's Inspect reads of a sandbox, where the pool
// accounts the disk and no cgroup counts a peak.
func (f *fakeHost) Usage(ctx context.Context, id string) (supervisor.Inspection, error) {
	rec, err := f.S.Get(id)
	if err != nil {
		return supervisor.Inspection{}, err
	}
	in := supervisor.Inspection{Staleness: supervisor.StaleUnknown}
	if vol, err := f.pool.Get(ctx, rec.Volume); err == nil {
		if u, err := f.pool.Usage(ctx, vol); err == nil {
			in.Disk.Value, in.Disk.Known = u.Exclusive, true
		}
	}
	return in, nil
}

// names are the sandboxes recorded now, by name.
func (f *fakeHost) names(t *testing.T) map[string]bool {
	t.Helper()
	recs, err := f.S.List()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, r := range recs {
		out[r.Name] = true
	}
	return out
}

// path is the writable copy of sandbox id.
func (f *fakeHost) path(id string) (string, error) {
	sb, err := f.Sandbox(ctx, id)
	return sb.Path, err
}

// runner is a fake commands.Runner: fn says how each command ends.
type runner struct {
	mu    sync.Mutex
	calls []call
	fn    func(ctx context.Context, id string, o commands.ExecOptions) (commands.Captured, error)
}

// call is one command the room asked to run.
type call struct {
	ID   string
	Opts commands.ExecOptions
	Max  int
}

func (r *runner) RunCaptured(ctx context.Context, id string, o commands.ExecOptions, max int) (commands.Captured, error) {
	r.mu.Lock()
	r.calls = append(r.calls, call{ID: id, Opts: o, Max: max})
	r.mu.Unlock()
	return r.fn(ctx, id, o)
}

func (r *runner) all() []call {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]call(nil), r.calls...)
}

// line is the shell line of a command the room runs (sh -c LINE).
func line(o commands.ExecOptions) string {
	if len(o.Argv) != 3 || o.Argv[0] != "/bin/sh" || o.Argv[1] != "-c" {
		panic(fmt.Sprintf("not a shell line: %q", o.Argv))
	}
	return o.Argv[2]
}

// exited is a command's end: it exited code after took, having printed
// out.
func exited(code int, took time.Duration, out string) commands.Captured {
	return commands.Captured{Result: nsinit.Result{How: nsinit.Exited, Code: code}, Output: out, Took: took}
}
