package projects

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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
	OriginConfig = "config" // Config.Locations: sandboxd.toml's [[project]]
	OriginAdded  = "added"  // Add, recorded in the state store
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

// Places are everywhere its files are: its volume and where it is seen.
func (p Project) Places() []string { return append([]string{p.Location}, p.At...) }

// Config is what a Registry is made with: the configuration's projects,
// and what it needs of the core.
type Config struct {
	// Locations are the configuration's projects (name: a btrfs
	// subvolume path or a ZFS dataset); Access says who may use each
	// (none listed: its directory's owner); Env is the environment of
	// their units. New copies the projects and who may use them: the
	// caller's maps stay the caller's.
	Locations map[string]string
	Access    map[string]Access
	Env       map[string]Env

	Backend cowfs.Backend
	// Units freezes and thaws a project's writers; it must also read a
	// service's environment (ServiceEnvironment) when a project names
	// units.
	Units Units
	Store *state.Store
	Log   *slog.Logger
	// Admission is the core's admission lock, under which a create
	// checks its project and records its intent: a change of the
	// projects holds it too, so that a project cannot be removed between
	// a create's check and its record.
	Admission sync.Locker
	// Audit records a change of the projects, with the caller of ctx
	// (the core's audit log).
	Audit func(ctx context.Context, e audit.Entry, rec state.Record, err error)
	// Caller names the caller of ctx for the journal ("1000", "daemon").
	Caller func(ctx context.Context) string
	// OnLoad are what runs on the recorded projects as Load reads them
	// (the LoadProjects hooks the core's rooms join), as they are then.
	OnLoad func() []func(ctx context.Context, recs []state.Project) []state.Project
}

// Units is the seam to systemd the registry uses: a project's writers
// frozen and thawed.
type Units interface {
	Freeze(ctx context.Context, name string) error
	Thaw(ctx context.Context, name string) error
}

// Registry holds the projects: the configuration's, fixed, and the ones
// added at run time. Readers (a create, a sandbox's world, an exec) take
// mu alone; a change also holds the core's admission lock
// (Config.Admission).
type Registry struct {
	cfg Config
	mu  sync.RWMutex
	m   map[string]Project
	// access says who may use each project besides root and admins (none
	// listed: its directory's owner).
	access map[string]Access
	// frozen counts the snapshots that want each writer frozen now.
	frozen freezeCounts
	// gate: one promotion of a project at a time, and which snapshot a
	// create takes while a stage is under way (gate.go).
	gate Gate
}

// New makes the registry with the configuration's projects and who may
// use them.
func New(cfg Config) *Registry {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	r := &Registry{cfg: cfg, m: make(map[string]Project, len(cfg.Locations)), access: map[string]Access{}}
	for name, loc := range cfg.Locations {
		r.m[name] = Project{Name: name, Location: loc, Origin: OriginConfig}
		r.access[name] = cfg.Access[name].clone()
	}
	return r
}

// Get is the project called name, and whether there is one.
func (r *Registry) Get(name string) (Project, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	p, ok := r.m[name]
	return p, ok
}

// Location is the location of project name, "" when there is none.
func (r *Registry) Location(name string) string {
	p, _ := r.Get(name)
	return p.Location
}

// List returns every project, by name.
func (r *Registry) List() []Project {
	r.mu.RLock()
	out := make([]Project, 0, len(r.m))
	for _, p := range r.m {
		out = append(out, p)
	}
	r.mu.RUnlock()
	slices.SortFunc(out, func(a, b Project) int { return strings.Compare(a.Name, b.Name) })
	return out
}

func (r *Registry) set(p Project, access Access) {
	r.mu.Lock()
	r.m[p.Name] = p
	r.access[p.Name] = access.clone()
	r.mu.Unlock()
}

// Register registers the project rec makes, as Load does (an adoption's,
// under the admission lock).
func (r *Registry) Register(rec state.Project) {
	r.set(projectOf(rec), Access{Users: rec.Users, Groups: rec.Groups})
}

// Forget unregisters project name (an adoption undone, under the
// admission lock).
func (r *Registry) Forget(name string) {
	r.mu.Lock()
	delete(r.m, name)
	delete(r.access, name)
	r.mu.Unlock()
}

// getAccess returns project name and who may use it.
func (r *Registry) getAccess(name string) (Project, Access, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	p, ok := r.m[name]
	return p, r.access[name], ok
}

// NameRule says what a project's or a sandbox's name may be: the rule of
// cowfs.ValidateName, which checks them, as it checks the project names of
// sandboxd.toml (config's nameRule says the same).
var NameRule = fmt.Sprintf("use letters, digits, '-', '_' and '.', not starting with '.' or '-', at most %d bytes", cowfs.MaxNameLen)

// QuoteName quotes a name for a message, cut short: a refused name can be
// long.
func QuoteName(name string) string {
	if len(name) > 40 {
		return fmt.Sprintf("%q...", name[:40])
	}
	return fmt.Sprintf("%q", name)
}

// Load reads the projects added at run time from the state store into
// the registry, beside the configuration's; call it before the core's
// Reconcile (which may restart sandboxes of those projects). An added
// project with the name of one of the configuration's is left out, the
// configuration winning, and returned, for the daemon to warn about; its
// record stays, so that it comes back if the configuration drops its own.
func (r *Registry) Load() (shadowed []Project, err error) {
	added, err := r.cfg.Store.Projects()
	if err != nil {
		return nil, fmt.Errorf("loading the added projects: %w", err)
	}
	// A crash between a freeze and its thaw (a snapshot, an adoption's
	// copy) must not leave a host's service stopped: every recorded
	// project's writers are thawed (thawing one not frozen does nothing).
	for _, p := range added {
		if len(p.Freeze) > 0 {
			r.thaw(p.Name, p.Freeze)
		}
	}
	r.cfg.Admission.Lock()
	defer r.cfg.Admission.Unlock()
	if r.cfg.OnLoad != nil {
		for _, f := range r.cfg.OnLoad() {
			added = f(context.Background(), added)
		}
	}
	for _, p := range added {
		if had, taken := r.Get(p.Name); taken {
			if had.Origin == OriginConfig {
				shadowed = append(shadowed, projectOf(p))
			}
			continue // or loaded already
		}
		r.Register(p)
	}
	return shadowed, nil
}

// Add registers the volume at location (a btrfs subvolume path or a ZFS
// dataset of the pool) as project name, recorded in the state store so
// that it outlives the daemon. The name follows the rule of
// sandboxd.toml's project names and must be free; the location must be a
// volume of the pool. Its files are not touched. Who may use it are the
// users and groups of access (with none: its directory's owner, and its
// group if the directory is group-writable).
func (r *Registry) Add(ctx context.Context, name, location string, access Access) (err error) {
	defer func() { r.audit(ctx, "project-add", name, location, err) }()
	if err := CheckNew(name, access); err != nil {
		return fmt.Errorf("adding project %s: %w", QuoteName(name), err)
	}
	if filepath.IsAbs(location) {
		location = filepath.Clean(location) // as sandboxd.toml has them, and as the sandboxes' worlds hide them
	}
	if _, err := r.cfg.Backend.Project(ctx, location); err != nil {
		if !isVolumeProblem(err) {
			return fmt.Errorf("adding project %q at %s: %w", name, location, err)
		}
		return fmt.Errorf("adding project %q: %s is not a volume of the pool: %v; it must be %s: %w",
			name, location, err, r.volumeKind(), ErrInvalidProject)
	}
	r.cfg.Admission.Lock()
	defer r.cfg.Admission.Unlock()
	if p, taken := r.Get(name); taken {
		return fmt.Errorf("adding project %q: %s: %w", name, TakenBy(p), ErrExists)
	}
	rec := state.Project{Name: name, Location: location, Added: time.Now().UTC(), Users: access.Users, Groups: access.Groups}
	if err := r.cfg.Store.AddProject(rec); err != nil {
		if errors.Is(err, state.ErrProjectExists) {
			// Recorded, but not loaded: the configuration has it (and
			// wins), which the check above tells; or Load was not called.
			return fmt.Errorf("adding project %q: a project of that name is recorded already (was LoadProjects called?): %w", name, ErrExists)
		}
		return fmt.Errorf("adding project %q: %w", name, err)
	}
	r.set(Project{Name: name, Location: location, Origin: OriginAdded}, access)
	r.cfg.Log.Info("project added", "ACTION", "project-add", "CALLER_UID", r.cfg.Caller(ctx), "project", name, "location", location,
		"users", strings.Join(access.Users, ","), "groups", strings.Join(access.Groups, ","))
	return nil
}

// SeenAt is where the sandboxes of project name see it (and the host):
// vol's path, or an adopted directory's whose files are in vol.
func (r *Registry) SeenAt(name string, vol cowfs.Volume) string {
	if p, ok := r.Get(name); ok && len(p.At) > 0 {
		return p.At[0]
	}
	return vol.Path
}

// CheckNew checks a new project's name and who may use it.
func CheckNew(name string, access Access) error {
	if err := cowfs.ValidateName(name); err != nil {
		return fmt.Errorf("not a valid name: %s: %w", NameRule, ErrInvalidProject)
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
func (r *Registry) volumeKind() string {
	info := r.cfg.Backend.Info()
	if info.Backend == "zfs" {
		pool, _, _ := strings.Cut(info.Root, "/")
		return fmt.Sprintf("a ZFS dataset of pool %s (make one with `zfs create %s/NAME`)", pool, pool)
	}
	return fmt.Sprintf("a btrfs subvolume on the pool's filesystem, that of %s (make one with `btrfs subvolume create PATH`)", info.Root)
}

// Remove unregisters the added project name. It takes a project
// with no sandboxes (in any state): each sandbox needs its project to be
// started again. The project's files are not touched; a project of the
// configuration is removed there.
func (r *Registry) Remove(ctx context.Context, name string) (err error) {
	location := ""
	defer func() { r.audit(ctx, "project-remove", name, location, err) }()
	r.cfg.Admission.Lock()
	defer r.cfg.Admission.Unlock()
	p, ok := r.Get(name)
	if !ok {
		return fmt.Errorf("removing project %q: %w", name, ErrUnknownProject)
	}
	location = p.Location
	if p.Origin == OriginConfig {
		return fmt.Errorf("removing project %q: project %q is defined in sandboxd.toml; remove it there: %w", name, name, ErrInvalidProject)
	}
	// Under the admission lock every create of it has recorded its
	// intent, so none is missed here.
	recs, err := r.cfg.Store.List()
	if err != nil {
		return fmt.Errorf("removing project %q: %w", name, err)
	}
	// A warm pool's sandboxes are nobody's, and no caller can destroy
	// them: they do not hold the project (the pool destroys them once it
	// sees the project gone; a claim checks it is there).
	n := 0
	for _, rec := range recs {
		if rec.Project == name && !rec.Pool {
			n++
		}
	}
	if n > 0 {
		return fmt.Errorf("removing project %q: %d sandboxes of project %q exist; destroy them first: %w", name, n, name, ErrProjectInUse)
	}
	if err := r.cfg.Store.DeleteProject(name); err != nil && !errors.Is(err, state.ErrNoProject) {
		return fmt.Errorf("removing project %q: %w", name, err)
	}
	r.Forget(name)
	r.cfg.Log.Info("project removed", "ACTION", "project-remove", "CALLER_UID", r.cfg.Caller(ctx), "project", name, "location", location)
	return nil
}

// audit records a change of the projects in the audit log.
func (r *Registry) audit(ctx context.Context, action, name, location string, err error) {
	r.cfg.Audit(ctx, audit.Entry{Action: action, Location: location}, state.Record{Project: name}, err)
}

// ValidateSandboxName checks a sandbox's name: a name as cowfs.ValidateName
// has it, and not 12 lowercase hex digits, which would read as a sandbox's
// id wherever a name or an id is asked for. The message starts with the
// name quoted, so that a caller can put what it is before it ("option
// Name ...").
func ValidateSandboxName(name string) error {
	if err := cowfs.ValidateName(name); err != nil {
		return fmt.Errorf("%s is not a valid name: %s", QuoteName(name), NameRule)
	}
	if looksLikeID(name) {
		return fmt.Errorf("%q is 12 hex digits, which would read as a sandbox id: pick a name that is not", name)
	}
	return nil
}

// looksLikeID says whether name has the form of a sandbox's id
// (internal/randid).
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
