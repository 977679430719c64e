package supervisor

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/supervisor/audit"
	"github.com/sandboxd/sandboxd/supervisor/state"
)

// Where a project comes from.
const (
	OriginConfig = "config" // Config.Projects: sandboxd.toml's [[project]]
	OriginAdded  = "added"  // AddProject, recorded in the state store
)

// Project is a project sandboxes can be made of.
type Project struct {
	Name string
	// Location is where it is in the pool: a btrfs subvolume path or a
	// ZFS dataset.
	Location string
	Origin   string // OriginConfig or OriginAdded
	// At is where the host and sandboxes see it, when not at Location:
	// adopted directories whose files went into a volume of the pool.
	// With more than one, the volume holds each at its own path below
	// its root.
	At []string
	// Freeze are host services that write it, frozen while a sandbox's
	// base is snapshotted.
	Freeze []string
}

// Path is where the project is seen, on the host and in its sandboxes
// (the first of its directories).
func (p Project) Path() string {
	if len(p.At) > 0 {
		return p.At[0]
	}
	return p.Location
}

// places are everywhere its files are: its volume and where it is seen.
func (p Project) places() []string { return append([]string{p.Location}, p.At...) }

// projectRegistry holds the projects: the configuration's, fixed, and the
// ones added at run time. Readers (a create, a sandbox's world, an exec)
// take mu alone; a change also holds the supervisor's admission lock, under
// which a create checks its project and records its intent, so that a
// project cannot be removed between a create's check and its record.
type projectRegistry struct {
	mu sync.RWMutex
	m  map[string]Project
	// access says who may use each project besides root and admins (none
	// listed: its directory's owner).
	access map[string]ProjectAccess
}

// newProjectRegistry starts with the configuration's projects and who
// may use them (copied: the caller's maps stay the caller's).
func newProjectRegistry(config map[string]string, access map[string]ProjectAccess) *projectRegistry {
	r := &projectRegistry{m: make(map[string]Project, len(config)), access: map[string]ProjectAccess{}}
	for name, loc := range config {
		r.m[name] = Project{Name: name, Location: loc, Origin: OriginConfig}
		r.access[name] = access[name].clone()
	}
	return r
}

func (r *projectRegistry) get(name string) (Project, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	p, ok := r.m[name]
	return p, ok
}

// location is the location of project name, "" when there is none.
func (r *projectRegistry) location(name string) string {
	p, _ := r.get(name)
	return p.Location
}

// list returns every project, by name.
func (r *projectRegistry) list() []Project {
	r.mu.RLock()
	out := make([]Project, 0, len(r.m))
	for _, p := range r.m {
		out = append(out, p)
	}
	r.mu.RUnlock()
	slices.SortFunc(out, func(a, b Project) int { return strings.Compare(a.Name, b.Name) })
	return out
}

func (r *projectRegistry) set(p Project, access ProjectAccess) {
	r.mu.Lock()
	r.m[p.Name] = p
	r.access[p.Name] = access.clone()
	r.mu.Unlock()
}

func (r *projectRegistry) remove(name string) {
	r.mu.Lock()
	delete(r.m, name)
	delete(r.access, name)
	r.mu.Unlock()
}

// getAccess returns project name and who may use it.
func (r *projectRegistry) getAccess(name string) (Project, ProjectAccess, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	p, ok := r.m[name]
	return p, r.access[name], ok
}

// nameRule says what a project's or a sandbox's name may be: the rule of
// cowfs.ValidateName, which checks them, as it checks the project names of
// sandboxd.toml (config's nameRule says the same).
var nameRule = fmt.Sprintf("use letters, digits, '-', '_' and '.', not starting with '.' or '-', at most %d bytes", cowfs.MaxNameLen)

// quoteName quotes a name for a message, cut short: a refused name can be
// long.
func quoteName(name string) string {
	if len(name) > 40 {
		return fmt.Sprintf("%q...", name[:40])
	}
	return fmt.Sprintf("%q", name)
}

// ValidateSandboxName checks a sandbox's name: a name as cowfs.ValidateName
// has it, and not 12 lowercase hex digits, which would read as a sandbox's
// id wherever a name or an id is asked for. The message starts with the
// name quoted, so that a caller can put what it is before it ("option
// Name ...").
func ValidateSandboxName(name string) error {
	if err := cowfs.ValidateName(name); err != nil {
		return fmt.Errorf("%s is not a valid name: %s", quoteName(name), nameRule)
	}
	if looksLikeID(name) {
		return fmt.Errorf("%q is 12 hex digits, which would read as a sandbox id: pick a name that is not", name)
	}
	return nil
}

// looksLikeID says whether name has the form of newID's ids.
func looksLikeID(name string) bool {
	if len(name) != 12 {
		return false
	}
	for _, c := range []byte(name) {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// Projects returns every project, by name.
func (s *Supervisor) Projects() []Project { return s.projects.list() }

// LoadProjects reads the projects added at run time from the state store
// into the supervisor, beside the configuration's; call it before
// Reconcile (which may restart sandboxes of those projects). An added
// project with the name of one of the configuration's is left out, the
// configuration winning, and returned, for the daemon to warn about; its
// record stays, so that it comes back if the configuration drops its own.
func (s *Supervisor) LoadProjects() (shadowed []Project, err error) {
	added, err := s.cfg.Store.Projects()
	if err != nil {
		return nil, fmt.Errorf("loading the added projects: %w", err)
	}
	// A crash between a freeze and its thaw (a snapshot, an adoption's
	// copy) must not leave a host's service stopped: every recorded
	// project's writers are thawed (thawing one not frozen does nothing).
	for _, p := range added {
		if len(p.Freeze) > 0 {
			s.thawWriters(p.Name, p.Freeze)
		}
	}
	s.admission.Lock()
	defer s.admission.Unlock()
	for _, f := range s.hooks.LoadProjects.each() {
		added = f(context.Background(), added)
	}
	for _, p := range added {
		if had, taken := s.projects.get(p.Name); taken {
			if had.Origin == OriginConfig {
				shadowed = append(shadowed, projectOf(p))
			}
			continue // or loaded already
		}
		s.projects.set(projectOf(p), ProjectAccess{Users: p.Users, Groups: p.Groups})
	}
	return shadowed, nil
}

// AddProject registers the volume at location (a btrfs subvolume path or
// a ZFS dataset of the pool) as project name, recorded in the state store
// so that it outlives the daemon. The name follows the rule of
// sandboxd.toml's project names and must be free; the location must be a
// volume of the pool. Its files are not touched. Who may use it is its
// directory's owner (AddProjectWith names others).
func (s *Supervisor) AddProject(ctx context.Context, name, location string) error {
	return s.AddProjectWith(ctx, name, location, ProjectAccess{})
}

// AddProjectWith is AddProject with the users and groups who may use the
// project (with none: its directory's owner, and its group if the
// directory is group-writable).
func (s *Supervisor) AddProjectWith(ctx context.Context, name, location string, access ProjectAccess) (err error) {
	defer func() { s.auditProject(ctx, "project-add", name, location, err) }()
	if err := CheckNewProject(name, access); err != nil {
		return fmt.Errorf("adding project %s: %w", quoteName(name), err)
	}
	if filepath.IsAbs(location) {
		location = filepath.Clean(location) // as sandboxd.toml has them, and as the sandboxes' worlds hide them
	}
	if _, err := s.cfg.Backend.Project(ctx, location); err != nil {
		if !isVolumeProblem(err) {
			return fmt.Errorf("adding project %q at %s: %w", name, location, err)
		}
		return fmt.Errorf("adding project %q: %s is not a volume of the pool: %v; it must be %s: %w",
			name, location, err, s.volumeKind(), ErrInvalidProject)
	}
	s.admission.Lock()
	defer s.admission.Unlock()
	if p, taken := s.projects.get(name); taken {
		return fmt.Errorf("adding project %q: %s: %w", name, TakenBy(p), ErrExists)
	}
	rec := state.Project{Name: name, Location: location, Added: time.Now().UTC(), Users: access.Users, Groups: access.Groups}
	if err := s.cfg.Store.AddProject(rec); err != nil {
		if errors.Is(err, state.ErrProjectExists) {
			// Recorded, but not loaded: the configuration has it (and
			// wins), which the check above tells; or LoadProjects was not
			// called.
			return fmt.Errorf("adding project %q: a project of that name is recorded already (was LoadProjects called?): %w", name, ErrExists)
		}
		return fmt.Errorf("adding project %q: %w", name, err)
	}
	s.projects.set(Project{Name: name, Location: location, Origin: OriginAdded}, access)
	s.log.Info("project added", "ACTION", "project-add", "CALLER_UID", uidField(ctx), "project", name, "location", location,
		"users", strings.Join(access.Users, ","), "groups", strings.Join(access.Groups, ","))
	return nil
}

// seenAt is where the sandboxes of project name see it (and the host):
// vol's path, or an adopted directory's whose files are in vol.
func (s *Supervisor) seenAt(name string, vol cowfs.Volume) string {
	if p, ok := s.projects.get(name); ok && len(p.At) > 0 {
		return p.At[0]
	}
	return vol.Path
}

// CheckNewProject checks a new project's name and who may use it.
func CheckNewProject(name string, access ProjectAccess) error {
	if err := cowfs.ValidateName(name); err != nil {
		return fmt.Errorf("not a valid name: %s: %w", nameRule, ErrInvalidProject)
	}
	if err := access.validate(); err != nil {
		return fmt.Errorf("%w: %w", err, ErrInvalidProject)
	}
	return nil
}

// projectOf is the project an added project's record makes.
func projectOf(r state.Project) Project {
	p := Project{Name: r.Name, Location: r.Location, Origin: OriginAdded, Freeze: r.Freeze}
	if r.Adoption != nil && (r.Adoption.How == state.AdoptMount || r.Adoption.How == state.AdoptOwned) {
		p.At = r.Adoption.Paths()
	}
	return p
}

// TakenBy says which project holds a name, for the refusal of another.
func TakenBy(p Project) string {
	if p.Origin == OriginConfig {
		return fmt.Sprintf("a project named %q is defined in sandboxd.toml (at %s); pick another name", p.Name, p.Location)
	}
	return fmt.Sprintf("a project named %q exists (at %s); pick another name or remove it", p.Name, p.Location)
}

// isVolumeProblem says whether err, from Backend.Project, means that the
// location is not a volume of the pool (the caller's mistake) rather than
// that the pool could not be asked.
func isVolumeProblem(err error) bool {
	for _, e := range []error{cowfs.ErrNotFound, cowfs.ErrNotVolume, cowfs.ErrInvalidName, cowfs.ErrOutsidePool, cowfs.ErrUnsupportedFS} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// volumeKind says what a project of this pool is, and how one is made.
func (s *Supervisor) volumeKind() string {
	info := s.cfg.Backend.Info()
	if info.Backend == "zfs" {
		pool, _, _ := strings.Cut(info.Root, "/")
		return fmt.Sprintf("a ZFS dataset of pool %s (make one with `zfs create %s/NAME`)", pool, pool)
	}
	return fmt.Sprintf("a btrfs subvolume on the pool's filesystem, that of %s (make one with `btrfs subvolume create PATH`)", info.Root)
}

// RemoveProject unregisters the added project name. It takes a project
// with no sandboxes (in any state): each sandbox needs its project to be
// started again. The project's files are not touched; a project of the
// configuration is removed there.
func (s *Supervisor) RemoveProject(ctx context.Context, name string) (err error) {
	location := ""
	defer func() { s.auditProject(ctx, "project-remove", name, location, err) }()
	s.admission.Lock()
	defer s.admission.Unlock()
	p, ok := s.projects.get(name)
	if !ok {
		return fmt.Errorf("removing project %q: %w", name, ErrUnknownProject)
	}
	location = p.Location
	if p.Origin == OriginConfig {
		return fmt.Errorf("removing project %q: project %q is defined in sandboxd.toml; remove it there: %w", name, name, ErrInvalidProject)
	}
	// Under the admission lock every create of it has recorded its
	// intent, so none is missed here.
	recs, err := s.cfg.Store.List()
	if err != nil {
		return fmt.Errorf("removing project %q: %w", name, err)
	}
	n := 0
	for _, r := range recs {
		if r.Project == name {
			n++
		}
	}
	if n > 0 {
		return fmt.Errorf("removing project %q: %d sandboxes of project %q exist; destroy them first: %w", name, n, name, ErrProjectInUse)
	}
	if err := s.cfg.Store.DeleteProject(name); err != nil && !errors.Is(err, state.ErrNoProject) {
		return fmt.Errorf("removing project %q: %w", name, err)
	}
	s.projects.remove(name)
	s.log.Info("project removed", "ACTION", "project-remove", "CALLER_UID", uidField(ctx), "project", name, "location", location)
	return nil
}

// auditProject records a change of the projects in the audit log.
func (s *Supervisor) auditProject(ctx context.Context, action, name, location string, err error) {
	s.auditor.entry(ctx, audit.Entry{Action: action, Location: location}, state.Record{Project: name}, err)
}
