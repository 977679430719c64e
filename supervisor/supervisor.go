package supervisor

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/internal/crashpoint"
	"github.com/sandboxd/sandboxd/runtime/nsinit"
	"github.com/sandboxd/sandboxd/supervisor/audit"
	"github.com/sandboxd/sandboxd/supervisor/state"
	"github.com/sandboxd/sandboxd/units"
)

// Conditions callers (the D-Bus API) branch on.
var (
	// ErrNotFound: no sandbox with that id.
	ErrNotFound = state.ErrNotFound
	// ErrUnknownProject: no project of that name (configured or added).
	ErrUnknownProject = errors.New("unknown project")
	// ErrInvalid: options that make no sense (a negative TTL, bad limits,
	// a bad name).
	ErrInvalid = errors.New("invalid sandbox options")
	// ErrWrongState: an action the sandbox's state does not allow (thaw
	// of a sandbox that is not frozen, ...).
	ErrWrongState = errors.New("not allowed in the sandbox's state")
	// ErrExists: the name is taken, by another sandbox (a create's name)
	// or another project (AddProject).
	ErrExists = errors.New("name taken")
	// ErrInvalidProject: an AddProject or RemoveProject that cannot be
	// done as asked: a bad name, a location that is not a volume of the
	// pool, the removal of a project of the configuration.
	ErrInvalidProject = errors.New("invalid project")
	// ErrProjectInUse: RemoveProject of a project that has sandboxes.
	ErrProjectInUse = errors.New("project in use")
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
}

// Config is what a Supervisor works with.
type Config struct {
	Backend cowfs.Backend
	Units   Units
	Store   *state.Store
	// Projects maps a project's name to its location in the pool (a btrfs
	// subvolume path or a ZFS dataset): the configuration's projects.
	// New copies it; AddProject and RemoveProject change the supervisor's
	// projects, never this map, and LoadProjects adds the recorded ones.
	Projects map[string]string
	// ProjectAccess says who may use each of the configuration's projects
	// (by name); a project it lacks is open to its directory's owner.
	ProjectAccess map[string]ProjectAccess
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
	// Stages are where promotions go, in order ("": the project alone).
	Stages []Stage
	// MaxCheckpoints caps one sandbox's checkpoints (0:
	// DefaultMaxCheckpoints).
	MaxCheckpoints int
}

// Supervisor owns the sandboxes of this host: their volumes, scopes and
// records, and keeps the three consistent across failures and crashes.
type Supervisor struct {
	cfg   Config
	log   *slog.Logger
	locks idLocks // one operation at a time per sandbox
	// admission serializes the caps check with the recording of a create's
	// intent, so that concurrent creates cannot both take the last place
	// (or the same name), and the changes of the projects with both.
	admission sync.Mutex
	projects  *projectRegistry
	reaper    reaper
	worlds    worlds
	commands  commands
	gate      projectGate
}

// New makes a Supervisor. Call LoadProjects, then Reconcile, before
// serving.
func New(cfg Config) *Supervisor {
	log := cfg.Log
	if log == nil {
		log = slog.Default()
	}
	return &Supervisor{cfg: cfg, log: log, projects: newProjectRegistry(cfg.Projects, cfg.ProjectAccess)}
}

// CreateOptions are what a caller asks of a new sandbox.
type CreateOptions struct {
	Project string
	// Name is the sandbox's name ("": none): see ValidateSandboxName; no
	// other sandbox may have it.
	Name   string
	Owner  uint32 // the caller's uid
	Limits units.Limits
	// DiskQuota bounds what the sandbox writes, in bytes (0: none).
	DiskQuota uint64
	// TTL is the sandbox's time to live (0: none).
	TTL time.Duration
	// Profile names the profile whose settings fill what these leave
	// unset ("": the default profile).
	Profile string
	// Network is nsinit.NetworkNone, NetworkAllowlist (with Allow) or
	// NetworkHost; "" takes the profile's.
	Network string
	Allow   []string
	// ReadOnlyProject: the sandbox sees its project but cannot change it
	// (nil: the profile's).
	ReadOnlyProject *bool

	hidden, readOnly []string // the host's and the profile's
	// gateHeld: the caller (a promotion's checks) holds the project's
	// gate already.
	gateHeld bool
}

// Sandbox is a sandbox as callers see it.
type Sandbox struct {
	state.Record
	// Path is where the sandbox's copy of the project is on the host.
	Path string
}

// Names of a sandbox's parts, derived from its id: the filesystem and
// systemd alone tell which volumes and scopes are sandboxd's.
func baseName(id string) string   { return "base-" + id }
func volumeName(id string) string { return "sb-" + id }
func unitName(id string) string   { return "sandbox-" + id + ".scope" }

func newID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func (s *Supervisor) lock(id string) func() { return s.locks.lock(id) }

// idLocks is a mutex per sandbox id, kept only while someone holds or
// waits for it: a daemon that made and destroyed a million sandboxes
// must not keep a million mutexes.
type idLocks struct {
	mu sync.Mutex
	m  map[string]*idLock
}

type idLock struct {
	sync.Mutex
	users int // holders and waiters
}

func (l *idLocks) lock(id string) func() {
	l.mu.Lock()
	if l.m == nil {
		l.m = map[string]*idLock{}
	}
	e := l.m[id]
	if e == nil {
		e = &idLock{}
		l.m[id] = e
	}
	e.users++
	l.mu.Unlock()
	e.Lock()
	return func() {
		e.Unlock()
		l.mu.Lock()
		if e.users--; e.users == 0 {
			delete(l.m, id)
		}
		l.mu.Unlock()
	}
}

// Create makes a sandbox: its intent is recorded first, then a read-only
// base of the project, a writable snapshot of it, and a scope holding the
// sandbox's init process; the record turns ready last. Any failure undoes
// what was made, in reverse; a crash is finished by Reconcile.
func (s *Supervisor) Create(ctx context.Context, opts CreateOptions) (sb Sandbox, err error) {
	defer func() { s.audit(ctx, "create", sb.Record, err) }()
	if err := s.resolveProfile(&opts); err != nil {
		return sb, fmt.Errorf("creating a sandbox of %s: %w", opts.Project, err)
	}
	if err := s.cfg.Policy.applyDefaults(&opts); err != nil {
		return sb, fmt.Errorf("creating a sandbox of %s: %w", opts.Project, err)
	}
	s.applyHostDefaults(&opts)
	location := s.projects.location(opts.Project)
	if location == "" {
		return sb, fmt.Errorf("creating a sandbox of %q: %w", opts.Project, ErrUnknownProject)
	}
	if err := s.MayUseProject(ctx, opts.Project); err != nil {
		return sb, fmt.Errorf("creating a sandbox of %q: %w", opts.Project, err)
	}
	if opts.Name != "" {
		if err := ValidateSandboxName(opts.Name); err != nil {
			return sb, fmt.Errorf("creating a sandbox of %s: %w: name %w", opts.Project, ErrInvalid, err)
		}
	}
	if opts.TTL < 0 {
		return sb, fmt.Errorf("creating a sandbox of %s: time to live %v is negative: %w", opts.Project, opts.TTL, ErrInvalid)
	}
	if err := opts.Limits.Validate(); err != nil {
		return sb, fmt.Errorf("creating a sandbox of %s: %w: %w", opts.Project, ErrInvalid, err)
	}
	project, err := s.cfg.Backend.Project(ctx, location)
	if err == nil {
		err = s.roomInPool()
	}
	if err != nil {
		return sb, fmt.Errorf("creating a sandbox of %s: %w", opts.Project, err)
	}
	limits, err := json.Marshal(opts.Limits)
	if err != nil {
		return sb, err
	}
	s.admission.Lock()
	// Under the lock: a project removed since the check above is gone,
	// and one whose removal comes next will see this create's record.
	if s.projects.location(opts.Project) != location {
		s.admission.Unlock()
		return sb, fmt.Errorf("creating a sandbox of %q: it was removed meanwhile: %w", opts.Project, ErrUnknownProject)
	}
	recs, err := s.cfg.Store.List()
	if err != nil {
		s.admission.Unlock()
		return sb, fmt.Errorf("creating a sandbox of %s: %w", opts.Project, err)
	}
	// Names are unique among all the records, a destroying sandbox's too:
	// its name is free once it is gone.
	if opts.Name != "" {
		for _, r := range recs {
			if r.Name == opts.Name {
				s.admission.Unlock()
				return sb, fmt.Errorf("creating a sandbox of %s: a sandbox named %q exists; pick another name or destroy it: %w", opts.Project, opts.Name, ErrExists)
			}
		}
	}
	live := liveOf(recs)
	evict, err := s.cfg.Policy.admit(live, opts)
	if err != nil {
		s.admission.Unlock()
		return sb, fmt.Errorf("creating a sandbox of %s: %w", opts.Project, err)
	}
	for _, old := range evict {
		if err := s.destroy(ctx, old.ID, "evict"); err != nil && !errors.Is(err, ErrNotFound) {
			s.admission.Unlock()
			return sb, fmt.Errorf("creating a sandbox of %s: making room by destroying %s: %w", opts.Project, old.ID, err)
		}
	}
	id := newID()
	defer s.lock(id)()
	now := time.Now().UTC()
	rec := state.Record{
		ID: id, Name: opts.Name, Project: opts.Project, ProjectLocation: location, Owner: opts.Owner, State: state.Creating,
		Base: baseName(id), Volume: volumeName(id), Unit: unitName(id),
		Profile: opts.Profile, Created: now, Limits: limits, DiskQuota: opts.DiskQuota,
		Network: opts.Network, Allow: opts.Allow, ReadOnlyProject: *opts.ReadOnlyProject,
		Hidden: opts.hidden, ReadOnly: opts.readOnly,
	}
	if opts.TTL > 0 {
		rec.Expires = now.Add(opts.TTL)
	}
	sb.Record = rec
	err = s.cfg.Store.Create(rec)
	s.admission.Unlock()
	if err != nil {
		return sb, fmt.Errorf("creating sandbox %s: %w", id, err)
	}
	crashpoint.Hit(crashpoint.CreateRecorded)
	var undo []func(context.Context) error
	defer func() {
		if err == nil {
			return
		}
		cleanup := context.WithoutCancel(ctx)
		for i := len(undo) - 1; i >= 0; i-- {
			if uerr := undo[i](cleanup); uerr != nil {
				s.log.Error("undoing a failed create", "SANDBOX_ID", id, "error", uerr)
				return // keep the record: Reconcile finishes the job
			}
		}
		_ = s.cfg.Store.Delete(id)
	}()

	// The init starts first, so that its start overlaps the snapshots,
	// unless the sandbox's volume will be a mount of its own, which the
	// init's mount namespace, a copy of the daemon's, must already have.
	// startScope takes it over.
	var init *nsinit.Init
	handed := false
	undo = append(undo, func(context.Context) error {
		if init != nil && !handed {
			init.Kill()
		}
		return nil
	})
	launch := func() (err error) {
		init, err = s.launch(opts.Network)
		return err
	}
	early := !s.cfg.Backend.Info().Capabilities.SeparateMounts
	if early {
		if err := launch(); err != nil {
			return sb, fmt.Errorf("creating sandbox %s: %w", id, err)
		}
		crashpoint.Hit(crashpoint.CreateInitLaunched)
	}
	// Not while a promotion writes or checks the project (projectGate).
	ungate := func() {}
	if !opts.gateHeld {
		gate := s.gate.of(opts.Project)
		gate.RLock()
		ungate = gate.RUnlock
	}
	base, err := s.cfg.Backend.Snapshot(ctx, project, rec.Base, true)
	ungate()
	if err != nil {
		return sb, fmt.Errorf("creating sandbox %s: %w", id, err)
	}
	undo = append(undo, func(ctx context.Context) error { return s.cfg.Backend.Delete(ctx, base) })
	crashpoint.Hit(crashpoint.CreateBase)
	vol, err := s.cfg.Backend.Snapshot(ctx, base, rec.Volume, false)
	if err != nil {
		return sb, fmt.Errorf("creating sandbox %s: %w", id, err)
	}
	undo = append(undo, func(ctx context.Context) error { return s.cfg.Backend.Delete(ctx, vol) })
	crashpoint.Hit(crashpoint.CreateVolume)
	if opts.DiskQuota > 0 {
		if err := s.cfg.Backend.SetQuota(ctx, vol, opts.DiskQuota); err != nil {
			return sb, fmt.Errorf("creating sandbox %s: %w", id, err)
		}
	}
	if !early {
		if err := launch(); err != nil {
			return sb, fmt.Errorf("creating sandbox %s: %w", id, err)
		}
		crashpoint.Hit(crashpoint.CreateInitLaunched)
	}
	layer, made, err := s.makeLayer(ctx, &rec)
	if made {
		undo = append(undo, func(ctx context.Context) error { return s.cfg.Backend.Delete(ctx, layer) })
	}
	if err != nil {
		return sb, fmt.Errorf("creating sandbox %s: its system layer: %w", id, err)
	}
	crashpoint.Hit(crashpoint.CreateLayer)
	undo = append(undo, func(context.Context) error { return s.removeWorld(id) })
	handed = true
	if err := s.startScope(ctx, rec, opts.Limits, init); err != nil {
		return sb, fmt.Errorf("creating sandbox %s: %w", id, err)
	}
	undo = append(undo, func(ctx context.Context) error { return s.stopScope(ctx, rec.Unit) })
	crashpoint.Hit(crashpoint.CreateScopeStarted)
	rec, err = s.cfg.Store.Update(id, func(r *state.Record) error { r.State = state.Ready; r.Layer = rec.Layer; return nil })
	if err != nil {
		return sb, fmt.Errorf("creating sandbox %s: %w", id, err)
	}
	crashpoint.Hit(crashpoint.CreateReady)
	attrs := []any{"SANDBOX_ID", id, "CALLER_UID", opts.Owner, "ACTION", "create", "project", opts.Project}
	if opts.Name != "" {
		attrs = append(attrs, "name", opts.Name)
	}
	s.log.Info("sandbox created", attrs...)
	return Sandbox{Record: rec, Path: vol.Path}, nil
}

// startScope gives the sandbox's init (launched, or launched here) its
// world to build, and puts it in the sandbox's scope with its limits, the
// two at once: systemd's job and the init's mounts take about as long.
// The init runs in its own session so that it outlives the daemon (its
// scope, not the daemon's service, holds it). On failure it is killed.
func (s *Supervisor) startScope(ctx context.Context, rec state.Record, limits units.Limits, init *nsinit.Init) error {
	if init == nil {
		var err error
		if init, err = s.launch(rec.Network); err != nil {
			return err
		}
	}
	spec, err := s.spec(ctx, rec)
	if err != nil {
		init.Kill()
		return err
	}
	if limits.MemoryMax != nil {
		spec.ScratchSize = nsinit.ScratchSizeFor(*limits.MemoryMax)
	}
	built := make(chan error, 1)
	go func() { built <- init.Build(ctx, spec) }()
	scopeErr := s.cfg.Units.StartScope(ctx, units.Scope{
		Name:        rec.Unit,
		Description: fmt.Sprintf("sandboxd sandbox %s of %s", rec.ID, rec.Project),
		PIDs:        []int{init.PID},
		Slice:       units.OwnerSlice(rec.Owner),
		Limits:      limits,
		Devices:     units.SandboxDevices,
	})
	if err := <-built; err != nil || scopeErr != nil {
		init.Kill()
		if scopeErr == nil {
			_ = s.stopScope(context.WithoutCancel(ctx), rec.Unit)
		}
		if err != nil {
			return err // the init's account says more than the scope's
		}
		return scopeErr
	}
	w := &world{pid: init.PID}
	if err := s.startProxy(rec, w); err != nil {
		init.Kill()
		_ = s.stopScope(context.WithoutCancel(ctx), rec.Unit)
		return err
	}
	s.worlds.set(rec.ID, w)
	return nil
}

// stopScope stops a sandbox's scope; one that is already gone is fine.
func (s *Supervisor) stopScope(ctx context.Context, unit string) error {
	err := s.cfg.Units.Stop(ctx, unit)
	_ = s.cfg.Units.ResetFailed(ctx, unit)
	if err != nil && !errors.Is(err, units.ErrNotFound) {
		return fmt.Errorf("stopping %s: %w", unit, err)
	}
	return nil
}

// Get returns the sandbox id.
func (s *Supervisor) Get(ctx context.Context, id string) (Sandbox, error) {
	rec, err := s.cfg.Store.Get(id)
	if err != nil {
		return Sandbox{}, err
	}
	return s.sandbox(ctx, rec), nil
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
		out = append(out, Sandbox{Record: s.current(r), Path: paths[r.Volume]})
	}
	return out, nil
}

func (s *Supervisor) sandbox(ctx context.Context, rec state.Record) Sandbox {
	sb := Sandbox{Record: s.current(rec)}
	if v, err := s.cfg.Backend.Get(ctx, rec.Volume); err == nil {
		sb.Path = v.Path
	}
	return sb
}

// Destroy ends a sandbox: its intent is recorded, its scope stopped, its
// volumes deleted, and its record removed last; Reconcile finishes a
// destroy that a crash interrupted.
func (s *Supervisor) Destroy(ctx context.Context, id string) error {
	return s.destroy(ctx, id, "destroy")
}

// destroy is Destroy, named in the journal and audit log by action
// (destroy, expire, evict).
func (s *Supervisor) destroy(ctx context.Context, id, action string) (err error) {
	defer s.lock(id)()
	rec, err := s.cfg.Store.Update(id, func(r *state.Record) error { r.State = state.Destroying; return nil })
	if err != nil {
		return fmt.Errorf("destroying sandbox %s: %w", id, err)
	}
	defer func() { s.audit(ctx, action, rec, err) }()
	crashpoint.Hit(crashpoint.DestroyRecorded)
	if err := s.finishDestroy(ctx, rec); err != nil {
		return fmt.Errorf("destroying sandbox %s: %w", id, err)
	}
	crashpoint.Hit(crashpoint.DestroyRecordDeleted)
	s.log.Info("sandbox destroyed", "SANDBOX_ID", id, "ACTION", action, "CALLER_UID", uidField(ctx))
	// The source of its last promotion was kept for its next one.
	if s.earlierSource(ctx, id) != nil {
		if _, err := s.prunePromotions(ctx); err != nil {
			s.log.Warn("deleting a destroyed sandbox's promotion source", "SANDBOX_ID", id, "error", err)
		}
	}
	return nil
}

// uidField is the caller's uid for the journal, or "daemon".
func uidField(ctx context.Context) string {
	if uid := callerOf(ctx); uid != nil {
		return fmt.Sprint(*uid)
	}
	return "daemon"
}

// finishDestroy removes what exists of a sandbox, then its record.
func (s *Supervisor) finishDestroy(ctx context.Context, rec state.Record) error {
	if err := s.stopScope(ctx, rec.Unit); err != nil {
		return err
	}
	crashpoint.Hit(crashpoint.DestroyScopeStopped)
	if err := s.removeWorld(rec.ID); err != nil {
		return err
	}
	// Checkpoints (snapshots of the sandbox) first; clones before their
	// origins; the layer by its name, which a crash may have left out of
	// the record.
	var names []string
	for _, c := range slices.Backward(rec.Checkpoints) {
		names = append(names, checkpointLayerName(rec.ID, c.Name), checkpointName(rec.ID, c.Name))
	}
	names = append(names, layerName(rec.ID), rec.Volume, rec.Base)
	for _, name := range names {
		v, err := s.cfg.Backend.Get(ctx, name)
		if errors.Is(err, cowfs.ErrNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		if err := s.cfg.Backend.Delete(ctx, v); err != nil && !errors.Is(err, cowfs.ErrNotFound) {
			return err
		}
	}
	crashpoint.Hit(crashpoint.DestroyVolumesDeleted)
	return s.cfg.Store.Delete(rec.ID)
}

// Freeze stops every process of a ready or running sandbox until Thaw
// (its files and scope stay; its limits keep counting).
func (s *Supervisor) Freeze(ctx context.Context, id string) (Sandbox, error) {
	return s.transition(ctx, id, "freeze", []state.State{state.Ready, state.Running}, state.Frozen, s.cfg.Units.Freeze)
}

// Thaw lets a frozen sandbox's processes run again.
func (s *Supervisor) Thaw(ctx context.Context, id string) (Sandbox, error) {
	return s.transition(ctx, id, "thaw", []state.State{state.Frozen}, state.Ready, s.cfg.Units.Thaw)
}

// transition applies act to a sandbox's scope when its state is one of
// from, then records the state to.
func (s *Supervisor) transition(ctx context.Context, id, action string, from []state.State, to state.State,
	act func(context.Context, string) error) (sb Sandbox, err error) {
	defer s.lock(id)()
	rec, err := s.cfg.Store.Get(id)
	if err != nil {
		return sb, err
	}
	defer func() { s.audit(ctx, action, rec, err) }()
	if !slices.Contains(from, rec.State) {
		return sb, fmt.Errorf("%s of sandbox %s: it is %s: %w", action, id, rec.State, ErrWrongState)
	}
	if err := act(ctx, rec.Unit); err != nil {
		return sb, fmt.Errorf("%s of sandbox %s: %w", action, id, err)
	}
	rec, err = s.cfg.Store.Update(id, func(r *state.Record) error { r.State = to; return nil })
	if err != nil {
		return sb, fmt.Errorf("%s of sandbox %s: %w", action, id, err)
	}
	s.log.Info("sandbox "+string(to), "SANDBOX_ID", id, "ACTION", action, "CALLER_UID", uidField(ctx))
	return s.sandbox(ctx, rec), nil
}

// Staleness values: whether the project moved on since the sandbox's base.
const (
	Current      = "current"
	Stale        = "stale"
	StaleUnknown = "unknown" // the backend cannot tell without reading files
)

// Inspection is what a sandbox's live state reads: how its project moved
// on since its base, and what it uses now.
type Inspection struct {
	Staleness string
	// Memory, CPU (ns) and Tasks of its scope; Known is false where the
	// host does not account it.
	Memory, CPU, Tasks units.Amount
	// MemoryPeak is the most memory (bytes) its scope used at once since
	// the scope started (a rebase or restore starts it anew), read from
	// the memory cgroup of its init: known while the init runs, on a
	// kernel that counts it.
	MemoryPeak units.Amount
	// Disk is what the sandbox wrote (its volume's exclusive bytes), known
	// where the pool has quotas on.
	Disk units.Amount
}

// What Inspect reads: how the project moved (a snapshot of the project
// and a change list), and the live usage (a systemd call and cgroup and
// quota reads). A caller asks only for what it shows.
type Live int

const (
	LiveStaleness Live = 1 << iota
	LiveUsage
	LiveAll = LiveStaleness | LiveUsage
)

// Inspect reads what of a sandbox's staleness and live usage what asks
// for; the rest stays unknown.
func (s *Supervisor) Inspect(ctx context.Context, id string, what Live) (Inspection, error) {
	rec, err := s.cfg.Store.Get(id)
	if err != nil {
		return Inspection{}, err
	}
	in := Inspection{Staleness: StaleUnknown}
	if what&LiveStaleness != 0 {
		in.Staleness = s.staleness(ctx, rec)
	}
	if what&LiveUsage == 0 {
		return in, nil
	}
	if u, err := s.cfg.Units.Usage(ctx, rec.Unit); err == nil {
		in.Memory, in.CPU, in.Tasks = u.Memory, u.CPU, u.Tasks
	}
	if w := s.worlds.get(id); w != nil {
		if peak, err := units.MemoryPeak(w.pid); err == nil {
			in.MemoryPeak = units.Amount{Value: peak, Known: true}
		}
	}
	if vol, err := s.cfg.Backend.Get(ctx, rec.Volume); err == nil {
		if du, err := s.cfg.Backend.Usage(ctx, vol); err == nil {
			in.Disk = units.Amount{Value: du.Exclusive, Known: true}
		}
	}
	return in, nil
}

// staleness says whether rec's project moved on since its base.
func (s *Supervisor) staleness(ctx context.Context, rec state.Record) string {
	if _, err := s.projectLocation(ctx, rec); err != nil {
		return StaleUnknown // not a project the caller may read now
	}
	if s.cfg.Backend.Info().Capabilities.FastChanges {
		// The change list, not the generation: a generation lags until
		// the filesystem commits (seconds after a write on btrfs), and
		// moves with access times too (a read of the project).
		m, err := s.projectMoves(ctx, rec)
		switch {
		case err != nil:
			return StaleUnknown
		case len(m.Paths) > 0:
			return Stale
		}
		return Current
	}
	project, perr := s.cfg.Backend.Project(ctx, s.projects.location(rec.Project))
	base, berr := s.cfg.Backend.Get(ctx, rec.Base)
	if perr != nil || berr != nil {
		return StaleUnknown
	}
	switch changed, err := s.cfg.Backend.ChangedSince(ctx, project, base); {
	case err != nil:
		return StaleUnknown
	case changed:
		return Stale
	}
	return Current
}
