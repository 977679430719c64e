package supervisor

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/internal/activity"
	"github.com/sandboxd/sandboxd/internal/keylock"
	"github.com/sandboxd/sandboxd/internal/randid"
	"github.com/sandboxd/sandboxd/supervisor/admission"
	"github.com/sandboxd/sandboxd/supervisor/audit"
	"github.com/sandboxd/sandboxd/supervisor/idmap"
	"github.com/sandboxd/sandboxd/supervisor/projects"
	"github.com/sandboxd/sandboxd/supervisor/state"
	"github.com/sandboxd/sandboxd/units"
)

// Conditions callers (the D-Bus API) branch on.
var (
	// ErrNotFound: no sandbox with that id.
	ErrNotFound = state.ErrNotFound
	// ErrUnknownProject: no project of that name (configured or added).
	ErrUnknownProject = projects.ErrUnknownProject
	// ErrInvalid: options that make no sense (a negative TTL, bad limits,
	// a bad name).
	ErrInvalid = admission.ErrInvalid
	// ErrWrongState: an action the sandbox's state does not allow (thaw
	// of a sandbox that is not frozen, ...).
	ErrWrongState = errors.New("not allowed in the sandbox's state")
	// ErrExists: the name is taken, by another sandbox (a create's name)
	// or another project (Projects().Add).
	ErrExists = projects.ErrExists
	// ErrInvalidProject: a project's Add or Remove that cannot be
	// done as asked: a bad name, a location that is not a volume of the
	// pool, the removal of a project of the configuration.
	ErrInvalidProject = projects.ErrInvalidProject
	// ErrProjectInUse: the Remove of a project that has sandboxes.
	ErrProjectInUse = projects.ErrProjectInUse
	// ErrConflict: the project changed, since the sandbox's base, paths
	// that the sandbox changed too (a rebase, a promotion). The error
	// lists them.
	ErrConflict = errors.New("conflicting changes")
	// ErrBusy: another promotion of the same project is under way, or
	// what was asked keeps being changed meanwhile.
	ErrBusy = errors.New("busy")
)

// Units is the seam to systemd: *units.Manager in the daemon.
type Units interface {
	StartScope(ctx context.Context, s units.Scope) error
	Stop(ctx context.Context, name string) error
	Freeze(ctx context.Context, name string) error
	Thaw(ctx context.Context, name string) error
	Usage(ctx context.Context, name string) (units.Usage, error)
	ResetFailed(ctx context.Context, name string) error
	List(ctx context.Context, patterns ...string) ([]units.UnitState, error)
	SetSliceLimits(ctx context.Context, name string, l units.Limits) error
	SliceUsage(ctx context.Context, name string) (units.SliceUsage, error)
	// BindMount and RemoveMount: the persistent mounts of adopted
	// projects (supervisor/adopt).
	BindMount(ctx context.Context, what, where string) (string, error)
	RemoveMount(ctx context.Context, where string) error
	// PoolMount: the embedded pool mounted at boot, for those mounts'
	// sources to be there then.
	PoolMount(ctx context.Context, image, where string) (string, error)
	// StopService and StartService: the services that hold a directory
	// being adopted, when asked to restart them.
	StopService(ctx context.Context, name string) error
	StartService(ctx context.Context, name string) error
	// UnitOfPID: which unit a holder is of, as systemd says.
	UnitOfPID(ctx context.Context, pid int) (units.ProcessUnit, error)
}

// Config is what a Supervisor works with.
type Config struct {
	Backend cowfs.Backend
	Units   Units
	Store   *state.Store
	// Projects maps a project's name to its location in the pool (a btrfs
	// subvolume path or a ZFS dataset): the configuration's projects.
	// New copies it; the registry's Add and Remove change the
	// supervisor's projects, never this map, and its Load adds the
	// recorded ones.
	Projects map[string]string
	// ProjectAccess says who may use each of the configuration's projects
	// (by name); a project it lacks is open to its directory's owner.
	ProjectAccess map[string]projects.Access
	// ProjectEnv is the environment of the configuration's projects (by
	// name), read when a sandbox of one is made and kept in its record;
	// a project it lacks has none. Units must do ServiceEnvironment for
	// a project that names units.
	ProjectEnv map[string]projects.Env
	// ProjectIgnore is the configuration's [[project]] ignore patterns
	// (by name, checked when it was read): paths that diff, try and
	// promotion leave out (ignore.go).
	ProjectIgnore map[string][]string
	// InitCommand starts a sandbox's init (a program whose main runs
	// nsinit.Main when nsinit.IsInit): it builds the sandbox's world,
	// holds its scope for as long as the sandbox lives, and starts its
	// commands.
	InitCommand []string
	// RuntimeDir holds each live sandbox's runtime directory (its init's
	// control socket): /run/sandboxd in the daemon.
	RuntimeDir string
	// Profiles by name, and the one a create that names none gets ("":
	// none, the defaults of Profile).
	Profiles       map[string]Profile
	DefaultProfile string
	// Hidden and ReadOnly host paths of every sandbox.
	Hidden, ReadOnly []string
	Policy           Policy
	// Audit records every state-changing action (nil: none).
	Audit *audit.Log
	Log   *slog.Logger
	// UserLimits bound all of one owner's sandboxes together, set on the
	// owner's slice (units.OwnerSlice) before each of its scopes starts;
	// nothing set: no bound but each sandbox's own.
	UserLimits units.Limits
	// IdleFreeze freezes a sandbox idle for this long (0: never): see
	// FreezeIdle.
	IdleFreeze time.Duration
	// IdleStop stops a sandbox idle for this long (0: never): see Idle.
	IdleStop time.Duration
	// UserNS says whether sandboxes get user namespaces of their own
	// (see ProbeUserNS).
	UserNS UserNS
}

// Supervisor owns the sandboxes of this host: their volumes, scopes and
// records, and keeps the three consistent across failures and crashes.
type Supervisor struct {
	cfg   Config
	log   *slog.Logger
	hooks Hooks
	// auditor writes the audit log (Config.Audit).
	auditor auditor
	// scopes start and stop the sandboxes' scopes.
	scopes scopes
	// events: who hears of the sandboxes' changes (Subscribe).
	events events
	locks  keylock.Locks // one operation at a time per sandbox
	// admission serializes the caps check with the recording of a create's
	// intent, so that concurrent creates cannot both take the last place
	// (or the same name), and the changes of the projects with both.
	admission sync.Mutex
	projects  *projects.Registry // the project registry (supervisor/projects)
	worlds    worlds
	userns    usernsState
	stateDirs idmap.StateDirCache
	activity  activity.Times
	creating  atomic.Int32 // creates under way, but for the pools'
}

// New makes a Supervisor. Call Projects().Load, then Reconcile, before
// serving.
func New(cfg Config) *Supervisor {
	log := cfg.Log
	if log == nil {
		log = slog.Default()
	}
	s := &Supervisor{cfg: cfg, log: log, userns: usernsState{unavailable: errors.New("user namespaces were not probed (ProbeUserNS)")},
		scopes: scopes{units: cfg.Units, userLimits: cfg.UserLimits},
		worlds: worlds{root: cfg.RuntimeDir, initCommand: cfg.InitCommand, log: log}}
	s.worlds.ended = func(id string) {
		// Not a destroy's: it announces the sandbox gone, no state on the way.
		if rec, err := s.cfg.Store.Get(id); err == nil && rec.State != state.Destroying {
			s.events.changed(id)
		}
	}
	s.auditor = auditor{audit.Recorder{Log: cfg.Audit, Journal: log, Caller: callerOf, Refusals: refusals, More: s.hooks.Refusals.Funcs}}
	s.projects = projects.New(projects.Config{
		Locations: cfg.Projects, Access: cfg.ProjectAccess, Env: cfg.ProjectEnv,
		Backend: cfg.Backend, Units: cfg.Units, Store: cfg.Store, Log: log,
		Admission: &s.admission, Audit: s.auditor.entry, Caller: uidField, OnLoad: s.hooks.LoadProjects.Funcs,
	})
	return s
}

// Sandbox is a sandbox as callers see it.
type Sandbox struct {
	state.Record
	// Path is where the sandbox's copy of the project is on the host.
	Path string
}

func newID() string { return randid.Sandbox() }

// newCommandID is a short random id, for the names of the core's
// snapshots and prefixes.
func newCommandID() string { return randid.Hex(4) }

// Get returns the sandbox id.
func (s *Supervisor) Get(ctx context.Context, id string) (Sandbox, error) {
	rec, err := s.cfg.Store.Get(id)
	if err != nil {
		return Sandbox{}, err
	}
	return sandboxOf(ctx, s.cfg.Backend, &s.worlds, rec), nil
}

// List returns every sandbox, oldest first.
func (s *Supervisor) List(ctx context.Context) ([]Sandbox, error) {
	recs, err := s.cfg.Store.List()
	if err != nil {
		return nil, err
	}
	// One listing of the pool for all paths: per sandbox, ZFS would cost a
	// `zfs get` each.
	paths := map[string]string{}
	if vols, err := s.cfg.Backend.List(ctx); err == nil {
		for _, v := range vols {
			paths[v.Name] = v.Path
		}
	}
	out := make([]Sandbox, 0, len(recs))
	for _, r := range recs {
		out = append(out, Sandbox{Record: s.worlds.current(r), Path: paths[r.Volume]})
	}
	return out, nil
}

// Entries lists every sandbox briefly (id, name, project, state as
// recorded, owner), oldest first, from what the store keeps in memory: no
// record decoded, the pool not listed. Current gives an entry's state as
// it is now.
func (s *Supervisor) Entries() []state.Entry { return s.cfg.Store.Entries() }

// Current is e with the state current would give its record.
func (s *Supervisor) Current(e state.Entry) state.Entry {
	e.State = s.worlds.currentState(e.ID, e.State)
	return e
}

func sandboxOf(ctx context.Context, b cowfs.Backend, w *worlds, rec state.Record) Sandbox {
	sb := Sandbox{Record: w.current(rec)}
	if v, err := b.Get(ctx, rec.Volume); err == nil {
		sb.Path = v.Path
	}
	return sb
}
