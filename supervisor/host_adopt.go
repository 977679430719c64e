package supervisor

import (
	"context"

	"github.com/sandboxd/sandboxd/supervisor/state"
)

// What the adoption room (supervisor/adopt) needs of the core beyond
// Host: an adoption takes its name and path under the admission lock,
// as a project's add and a create do, and freezes the project's writers
// while its files move.

// WithAdmission runs fn under the admission lock.
func (h host) WithAdmission(fn func() error) error {
	h.s.admission.Lock()
	defer h.s.admission.Unlock()
	return fn()
}

// Projects are every project, by name.
func (h host) Projects() []Project { return h.s.projects.List() }

// LoadProject registers the project rec makes, as the registry's Load
// does.
func (h host) LoadProject(rec state.Project) {
	h.s.projects.Register(rec)
}

// ForgetProject unregisters project name.
func (h host) ForgetProject(name string) { h.s.projects.Forget(name) }

// FreezeUnits freezes names, host services that write project, and
// returns what thaws them.
func (h host) FreezeUnits(ctx context.Context, project string, names []string) (thaw func()) {
	return h.s.projects.FreezeUnits(ctx, project, names)
}

// RuntimeRoot is the directory of the sandboxes' runtime directories.
func (h host) RuntimeRoot() string { return h.s.cfg.RuntimeDir }

// Policy is the admission policy the core was made with.
func (h host) Policy() Policy { return h.s.cfg.Policy }
