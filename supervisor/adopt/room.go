package adopt

import (
	"context"
	"fmt"

	"github.com/sandboxd/sandboxd/supervisor"
	"github.com/sandboxd/sandboxd/supervisor/audit"
	"github.com/sandboxd/sandboxd/supervisor/state"
)

// Host is what the room needs of the core beyond supervisor.Host: its
// admission lock and project registry, and its freezing of a project's
// writers.
type Host interface {
	supervisor.Host
	// WithAdmission runs fn under the core's admission lock, under which
	// creates record their intent and projects are added and removed.
	WithAdmission(fn func() error) error
	// Projects are every project, by name.
	Projects() []supervisor.Project
	// LoadProject registers the project an added project's record makes;
	// ForgetProject unregisters project name. Both under WithAdmission.
	LoadProject(rec state.Project)
	ForgetProject(name string)
	// FreezeUnits freezes names, host services that write project, and
	// returns what thaws them.
	FreezeUnits(ctx context.Context, project string, names []string) (thaw func())
	// Policy is the core's admission policy (MaxAdoptionsPerOwner).
	Policy() supervisor.Policy
	// RuntimeRoot is the directory of the sandboxes' runtime directories
	// (sandboxd's own: no project holds it or is in it).
	RuntimeRoot() string
}

// Config is what the room works with, from sandboxd.toml.
type Config struct {
	// PoolImage and PoolMountpoint are the embedded pool's image and
	// where the daemon mounts it; empty for a pool the administrator
	// mounts (poolAtBoot).
	PoolImage, PoolMountpoint string
}

// Adoptions adopts directories as projects and releases them.
type Adoptions struct {
	h   Host
	cfg Config
	// adopting holds the paths of the adoptions under way, under the
	// core's admission lock (WithAdmission).
	adopting map[string]bool
}

// New makes the room over h; the adoptions a crash left half way are
// finished or undone, and mounted again, before their projects load.
func New(h Host, cfg Config) *Adoptions {
	s := &Adoptions{h: h, cfg: cfg, adopting: map[string]bool{}}
	h.Hooks().LoadProjects.Add(s.reconcileAdoptions)
	return s
}

// audit records a change of the projects in the audit log.
func (s *Adoptions) audit(ctx context.Context, action, name, location string, err error) {
	s.h.AuditEntry(ctx, audit.Entry{Action: action, Location: location}, state.Record{Project: name}, err)
}

// uidField is the caller's uid for the journal, or "daemon".
func uidField(ctx context.Context) string {
	if uid, ok := supervisor.CallerUID(ctx); ok {
		return fmt.Sprint(uid)
	}
	return "daemon"
}

// places are everywhere project p's files are: its volume and where it
// is seen.
func places(p supervisor.Project) []string { return append([]string{p.Location}, p.At...) }

// listed says whether a names users or groups.
func listed(a supervisor.ProjectAccess) bool { return len(a.Users)+len(a.Groups) > 0 }
