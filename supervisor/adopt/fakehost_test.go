package adopt

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/supervisor"
	"github.com/sandboxd/sandboxd/supervisor/hosttest"
	"github.com/sandboxd/sandboxd/supervisor/state"
)

// fakeHost is hosttest's Host with the extras the room asks of the
// core: an admission lock, a project registry, a policy, and the
// services it was asked to freeze.
type fakeHost struct {
	*hosttest.Host
	admission sync.Mutex
	policy    supervisor.Policy
	runtime   string

	mu       sync.Mutex
	projects map[string]supervisor.Project
	froze    []string
}

var _ Host = (*fakeHost)(nil)

func newFakeHost(t testing.TB, backend cowfs.Backend, units supervisor.Units) *fakeHost {
	return &fakeHost{Host: hosttest.New(t, backend, units), projects: map[string]supervisor.Project{}, runtime: t.TempDir()}
}

func (f *fakeHost) WithAdmission(fn func() error) error {
	f.admission.Lock()
	defer f.admission.Unlock()
	return fn()
}

func (f *fakeHost) Project(name string) (supervisor.Project, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, ok := f.projects[name]
	return p, ok
}

func (f *fakeHost) Projects() []supervisor.Project {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []supervisor.Project
	for _, p := range f.projects {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b supervisor.Project) int { return strings.Compare(a.Name, b.Name) })
	return out
}

func (f *fakeHost) LoadProject(rec state.Project) {
	p := supervisor.Project{Name: rec.Name, Location: rec.Location, Origin: supervisor.OriginAdded, Freeze: rec.Freeze}
	if ad := rec.Adoption; ad != nil && (ad.How == state.AdoptMount || ad.How == state.AdoptOwned) {
		p.At = ad.Paths()
	}
	f.mu.Lock()
	f.projects[rec.Name] = p
	f.mu.Unlock()
}

func (f *fakeHost) ForgetProject(name string) {
	f.mu.Lock()
	delete(f.projects, name)
	f.mu.Unlock()
}

func (f *fakeHost) FreezeUnits(_ context.Context, _ string, names []string) func() {
	f.mu.Lock()
	f.froze = append(f.froze, names...)
	f.mu.Unlock()
	return func() {}
}

func (f *fakeHost) Policy() supervisor.Policy { return f.policy }
func (f *fakeHost) RuntimeRoot() string       { return f.runtime }

// fakePool is a pool that only says where it is (its Info): no
// volumes, and no project made at a path (not a cowfs.ProjectMaker).
type fakePool struct {
	cowfs.Backend
	root string
}

func (p fakePool) Info() cowfs.Info { return cowfs.Info{Backend: "btrfs", Root: p.root} }
