package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/internal/crashpoint"
	"github.com/sandboxd/sandboxd/internal/revert"
	"github.com/sandboxd/sandboxd/internal/steps"
	"github.com/sandboxd/sandboxd/runtime/nsinit"
	"github.com/sandboxd/sandboxd/supervisor/admission"
	"github.com/sandboxd/sandboxd/supervisor/diskquota"
	"github.com/sandboxd/sandboxd/supervisor/state"
	"github.com/sandboxd/sandboxd/supervisor/volname"
	"github.com/sandboxd/sandboxd/units"
)

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
	// Boot: the sandbox runs a systemd of its own as its services' pid 1
	// (the host's binary and units through the overlay; nothing starts
	// but journald until asked), so that `systemctl start` starts the
	// host's services on the sandbox's copies of their files. It needs a
	// user namespace and a network of its own.
	Boot bool

	// Applied: the base is the project as a promotion's stage applied
	// it (its checks), not that stage's rollback point, which other
	// creates get meanwhile (projects.Gate). Not a caller's option: the
	// front door never sets it.
	Applied bool
	// NoCache: no owner's cache (a promotion's checks: what the owner's
	// other sandboxes put there must not change what a check does).
	NoCache bool
	// Pool: a warm pool's sandbox (supervisor/pool), made ahead of the
	// create that claims it: no time to live until then, and within the
	// caps without making room.
	Pool bool

	hidden, readOnly []string // the host's and the profile's
	// fork: the sandbox is a fork, made of these (CreateFork).
	fork *ForkSource
}

// Create makes a sandbox: its intent is recorded first, then a read-only
// base of the project, a writable snapshot of it, and a scope holding the
// sandbox's init process; the record turns ready last. Any failure undoes
// what was made, in reverse; a crash is finished by Reconcile.
func (s *Supervisor) Create(ctx context.Context, opts CreateOptions) (sb Sandbox, err error) {
	defer func() {
		action := "create"
		if opts.Pool { // no caller's: the claim is the create
			action = "pool-create"
		}
		s.auditor.record(ctx, action, sb.Record, err)
	}()
	if !opts.Pool { // the pools' refills wait for the others (Creating)
		s.creating.Add(1)
		defer s.creating.Add(-1)
	}
	timing := steps.New()
	ctx = steps.With(ctx, timing)
	if err := settle(&s.cfg, &opts); err != nil {
		return sb, fmt.Errorf("creating a sandbox of %s: %w", opts.Project, err)
	}
	if f := opts.fork; f != nil { // the source's, and what the host hides now
		opts.hidden, opts.readOnly = withSource(f.Record.Hidden, opts.hidden), withSource(f.Record.ReadOnly, opts.readOnly)
	}
	location := s.projects.Location(opts.Project)
	if location == "" {
		return sb, fmt.Errorf("creating a sandbox of %q: %w", opts.Project, ErrUnknownProject)
	}
	if opts.fork != nil && location != opts.fork.Record.ProjectLocation {
		return sb, fmt.Errorf("forking sandbox %s: %w (rebase it first)", opts.fork.Record.ID, ErrProjectMoved)
	}
	if opts.Applied || opts.NoCache || opts.Pool {
		// Past the project's gate, without the owner's cache, a pool's:
		// only the daemon's own creates (a promotion's checks) may ask.
		if a, err := ActorOf(ctx); err != nil || a.Daemon == "" {
			return sb, fmt.Errorf("creating a sandbox of %s: Applied, NoCache and Pool are the daemon's own options: %w", opts.Project, ErrInvalid)
		}
	}
	if err := s.mayUseProject(ctx, opts.Project); err != nil {
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
	if err := s.userns.canBoot(opts); err != nil {
		return sb, fmt.Errorf("creating a sandbox of %s: %w", opts.Project, err)
	}
	project, err := s.cfg.Backend.Project(ctx, location)
	if err == nil {
		err = cowfs.RoomIn(s.cfg.Backend)
	}
	if err != nil {
		return sb, fmt.Errorf("creating a sandbox of %s: %w", opts.Project, err)
	}
	// Read before the admission lock: it asks systemd and reads files.
	env, err := s.projects.Env(ctx, opts.Project)
	if opts.fork != nil {
		env, err = opts.fork.Record.Env, nil // the source's, as it was made
	}
	if err != nil {
		return sb, fmt.Errorf("creating a sandbox of %s: %w", opts.Project, err)
	}
	limits, err := json.Marshal(opts.Limits)
	if err != nil {
		return sb, err
	}
	rec := state.Record{
		Name: opts.Name, Project: opts.Project, ProjectLocation: location, Owner: opts.Owner, State: state.Creating,
		Profile: opts.Profile, Limits: limits, DiskQuota: opts.DiskQuota, Network: opts.Network, Allow: opts.Allow,
		ReadOnlyProject: *opts.ReadOnlyProject, Hidden: opts.hidden, ReadOnly: opts.readOnly, NoCache: opts.NoCache,
		Env: env, Boot: opts.Boot, Pool: opts.Pool,
	}
	timing.Mark("checks")
	// A RuntimeMax counts from the scope's start: a pool's sandbox, made
	// before the create, would run for less than asked (or be handed out
	// with its time already up). Such a create is a full one.
	if !opts.Pool && !opts.Applied && opts.fork == nil && opts.Limits.RuntimeMax == nil {
		for _, claim := range s.hooks.Claim.Funcs() {
			if sb, ok, err := claim(ctx, rec, opts.TTL); ok || err != nil {
				return sb, err
			}
		}
	}
	s.admission.Lock()
	timing.Mark("admission-wait")
	// Under the lock: a project removed since the check above is gone,
	// and one whose removal comes next will see this create's record.
	if s.projects.Location(opts.Project) != location {
		s.admission.Unlock()
		return sb, fmt.Errorf("creating a sandbox of %q: it was removed meanwhile: %w", opts.Project, ErrUnknownProject)
	}
	recs := s.cfg.Store.Entries()
	if err := nameFree(recs, opts.Name); err != nil {
		s.admission.Unlock()
		return sb, fmt.Errorf("creating a sandbox of %s: %w", opts.Project, err)
	}
	var evict []state.Entry
	if opts.Pool {
		err = s.cfg.Policy.AdmitPooled(admission.Live(recs), opts.Owner, opts.Limits.MemoryMax)
	} else {
		evict, err = s.cfg.Policy.Admit(admission.Live(recs), opts.Owner, opts.Limits.MemoryMax)
	}
	if err != nil {
		s.admission.Unlock()
		return sb, fmt.Errorf("creating a sandbox of %s: %w", opts.Project, err)
	}
	if f := opts.fork; f != nil && slices.ContainsFunc(evict, func(e state.Entry) bool { return e.ID == f.Record.ID }) {
		s.admission.Unlock() // making room must not destroy what is forked
		return sb, fmt.Errorf("forking sandbox %s: uid %d is at its limit of sandboxes (limits.max_sandboxes_per_user), and making room would destroy the sandbox forked; destroy another first: %w", f.Record.ID, opts.Owner, ErrLimitReached)
	}
	// What makes room is marked Destroying here (Live counts it no
	// more) and destroyed once the lock is left, before this sandbox is
	// made; a crash between leaves it to Reconcile.
	var evicted []func() error
	defer func() { evictAll(evicted) }() // those an early return left
	for _, old := range evict {
		_, finish, err := s.markDestroying(old.ID)
		if err != nil && !errors.Is(err, ErrNotFound) {
			s.admission.Unlock()
			return sb, fmt.Errorf("creating a sandbox of %s: making room by destroying %s: %w", opts.Project, old.ID, err)
		} else if err == nil {
			evicted = append(evicted, func() error { return finish(ctx, "evict") })
		}
	}
	ids, err := s.userns.allocateIDs(recs, opts.Owner)
	if err != nil {
		s.admission.Unlock()
		return sb, fmt.Errorf("creating a sandbox of %s: %w", opts.Project, err)
	}
	id := newID()
	defer s.locks.Lock(id)()
	rec.ID, rec.Base, rec.Volume, rec.Unit, rec.IDs, rec.Created = id, volname.Base(id), volname.Sandbox(id), volname.Unit(id), ids, time.Now().UTC()
	if opts.TTL > 0 && !opts.Pool {
		rec.Expires = rec.Created.Add(opts.TTL)
	}
	sb.Record = rec
	err = s.cfg.Store.Create(rec)
	s.admission.Unlock()
	if err != nil {
		return sb, fmt.Errorf("creating sandbox %s: %w", id, err)
	}
	timing.Mark("admission")
	crashpoint.Hit(crashpoint.CreateRecorded)
	undo := revert.New()
	defer func() {
		if err == nil {
			return
		}
		defer s.events.changed(id)
		if uerr := undo.Fail(ctx); uerr != nil {
			s.log.Error("undoing a failed create", "SANDBOX_ID", id, "error", uerr)
			return // keep the record: Reconcile finishes the job
		}
		_ = s.cfg.Store.Delete(id)
	}()
	if err = evictAll(evicted); err != nil {
		return sb, fmt.Errorf("creating sandbox %s: making room: %w", id, err)
	}
	evicted = nil

	// The init starts first, so that its start overlaps the snapshots,
	// unless the sandbox's volume will be a mount of its own, which the
	// init's mount namespace, a copy of the daemon's, must already have.
	// startScope takes it over (handOff).
	var init *nsinit.Init
	launch := func() (err error) {
		init, err = s.worlds.launch(rec)
		return err
	}
	// The owner's cache first: a volume mounted after the init's mount
	// namespace was copied (ZFS) would not show in it.
	for _, f := range s.hooks.BeforeLaunch.Funcs() {
		f(ctx, rec)
	}
	timing.Mark("before-launch")
	early := !s.cfg.Backend.Info().Capabilities.SeparateMounts
	var job *scopeStart
	var handOff []func()
	if early {
		if err := launch(); err != nil {
			return sb, fmt.Errorf("creating sandbox %s: %w", id, err)
		}
		crashpoint.Hit(crashpoint.CreateInitLaunched)
		timing.Mark("launch")
		// Its scope starts beside the snapshots (see scopeStart).
		job = s.scopes.begin(ctx, rec, opts.Limits, init)
		handOff = append(handOff, undo.Add(func(ctx context.Context) error {
			var err error
			if job.wait() == nil {
				err = s.scopes.stop(ctx, rec.Unit)
			}
			// Also when the scope could not be stopped (the undo ends
			// there, keeping the record for Reconcile): no init is left
			// running meanwhile.
			init.Kill()
			return err
		}))
	}
	// While a promotion's stage is under way, its rollback point
	// (projects.Gate); a promotion's checks get the project as applied.
	var base cowfs.Volume
	if opts.Applied {
		thaw := s.projects.FreezeWriters(ctx, opts.Project)
		base, err = s.cfg.Backend.Snapshot(ctx, project, rec.Base, true)
		thaw()
	} else if opts.fork != nil {
		base, err = forkBase(ctx, s.cfg.Backend, opts.fork.Record, rec.Base)
	} else {
		base, err = s.projects.SnapshotBase(ctx, opts.Project, project, rec.Base)
	}
	if err != nil {
		return sb, fmt.Errorf("creating sandbox %s: %w", id, err)
	}
	timing.Mark("base")
	undo.Add(func(ctx context.Context) error { return s.cfg.Backend.Delete(ctx, base) })
	crashpoint.Hit(crashpoint.CreateBase)
	from, release := base, func() error { return nil }
	if f := opts.fork; f != nil {
		from = f.Volume // the source's copy as it stood, or stands, held
		if f.Hold != nil {
			if release, err = f.Hold(ctx); err != nil {
				return sb, fmt.Errorf("creating sandbox %s: %w", id, err)
			}
			defer func() { _ = release() }()
		}
	}
	vol, err := s.cfg.Backend.Snapshot(ctx, from, rec.Volume, false)
	if err != nil {
		return sb, fmt.Errorf("creating sandbox %s: %w", id, err)
	}
	undo.Add(func(ctx context.Context) error { return s.cfg.Backend.Delete(ctx, vol) })
	if err := ownTopDir(s.projects, rec, vol); err != nil {
		return sb, fmt.Errorf("creating sandbox %s: %w", id, err)
	}
	crashpoint.Hit(crashpoint.CreateVolume)
	timing.Mark("volume")
	if !early {
		if err := launch(); err != nil {
			return sb, fmt.Errorf("creating sandbox %s: %w", id, err)
		}
		crashpoint.Hit(crashpoint.CreateInitLaunched)
		handOff = append(handOff, undo.AddFunc(init.Kill))
	}
	layer, made, err := makeLayer(ctx, s.cfg.Backend, &rec, opts.fork)
	if made {
		undo.Add(func(ctx context.Context) error { return s.cfg.Backend.Delete(ctx, layer) })
	}
	if err != nil {
		return sb, fmt.Errorf("creating sandbox %s: its system layer: %w", id, err)
	}
	if err := release(); err != nil { // both snapshots taken
		return sb, fmt.Errorf("creating sandbox %s: %w", id, err)
	}
	err = boundDisk(ctx, s.cfg.Backend, rec, vol, layer)
	if err == nil && opts.fork != nil {
		err = diskquota.Inherit(ctx, s.cfg.Backend, rec, opts.fork.Record)
	}
	if err != nil {
		return sb, fmt.Errorf("creating sandbox %s: %w", id, err)
	}
	undo.Add(func(ctx context.Context) error { unboundDisk(ctx, s.cfg.Backend, s.log, rec); return nil })
	crashpoint.Hit(crashpoint.CreateLayer)
	timing.Mark("layer")
	undo.Add(func(context.Context) error { return s.removeWorld(id) })
	// startScope kills the init and stops its scope if it fails.
	for _, f := range handOff {
		f()
	}
	if err := s.startScope(ctx, rec, opts.Limits, init, job); err != nil {
		return sb, fmt.Errorf("creating sandbox %s: %w", id, err)
	}
	undo.Add(func(ctx context.Context) error { return s.scopes.stop(ctx, rec.Unit) })
	crashpoint.Hit(crashpoint.CreateScopeStarted)
	timing.Mark("started")
	rec, err = s.cfg.Store.Update(id, func(r *state.Record) error { r.State = state.Ready; r.Layer = rec.Layer; return nil })
	if err != nil {
		return sb, fmt.Errorf("creating sandbox %s: %w", id, err)
	}
	crashpoint.Hit(crashpoint.CreateReady)
	s.events.changed(id)
	timing.Mark("ready")
	attrs := []any{"SANDBOX_ID", id, "CALLER_UID", opts.Owner, "ACTION", "create", "project", opts.Project,
		"took_ms", float64(timing.Took().Microseconds()) / 1000, "steps", timing.String()}
	if opts.Name != "" {
		attrs = append(attrs, "name", opts.Name)
	}
	s.log.Info("sandbox created", attrs...)
	return Sandbox{Record: rec, Path: vol.Path}, nil
}

// startScope gives the sandbox's init (launched, or launched here) its
// world to build, and puts it in the sandbox's scope with its limits, the
// two at once: systemd's job and the init's mounts take about as long.
// job is the scope's start if Create began it already (nil: begun here).
// The init runs in its own session so that it outlives the daemon (its
// scope, not the daemon's service, holds it). On failure it is killed,
// and its scope stopped.
func (s *Supervisor) startScope(ctx context.Context, rec state.Record, limits units.Limits, init *nsinit.Init, job *scopeStart) error {
	timing := steps.Of(ctx)
	if init == nil {
		for _, f := range s.hooks.BeforeLaunch.Funcs() {
			f(ctx, rec)
		}
		var err error
		if init, err = s.worlds.launch(rec); err != nil {
			return err
		}
	}
	spec, err := s.spec(ctx, rec)
	if err != nil {
		s.scopes.abandon(ctx, rec, init, job)
		return err
	}
	for _, f := range s.hooks.Spec.Funcs() {
		defer f(ctx, rec, &spec)()
	}
	timing.Mark("spec")
	mounts, err := s.idmapMounts(init, rec, spec)
	if err != nil {
		s.scopes.abandon(ctx, rec, init, job)
		return err
	}
	timing.Mark("idmap")
	if limits.MemoryMax != nil {
		spec.ScratchSize = nsinit.ScratchSizeFor(*limits.MemoryMax)
	}
	if job == nil {
		job = s.scopes.begin(ctx, rec, limits, init)
	}
	if rec.Boot {
		err = s.scopes.boot(ctx, rec, job, init, spec, mounts)
	} else {
		err = s.scopes.build(ctx, rec, job, init, spec, mounts)
	}
	if err != nil {
		return err
	}
	timing.Mark("build+scope")
	w := &world{pid: init.PID, proc: init.Process}
	if err := s.worlds.startProxy(rec, w); err != nil {
		init.Kill()
		_ = s.scopes.stop(context.WithoutCancel(ctx), rec.Unit)
		return err
	}
	s.worlds.set(rec.ID, w)
	s.hooks.started(ctx, Started{Record: rec, PID: init.PID})
	return nil
}

// buildInScope has init build its world while its scope starts (job):
// the two at once, as systemd's job and the init's mounts take about as
// long. On failure the init is killed and the scope stopped.
func (s *scopes) build(ctx context.Context, rec state.Record, job *scopeStart, init *nsinit.Init, spec nsinit.Spec, mounts *nsinit.Mounts) error {
	built := make(chan error, 1)
	timing := steps.Of(ctx)
	go func() {
		start := time.Now()
		err := init.Build(ctx, spec, mounts)
		timing.Add("build(beside)", time.Since(start))
		built <- err
	}()
	scopeErr := job.wait()
	if err := <-built; err != nil || scopeErr != nil {
		init.Kill()
		if scopeErr == nil {
			_ = s.stop(context.WithoutCancel(ctx), rec.Unit)
		}
		if err != nil {
			return err // the init's account says more than the scope's
		}
		return scopeErr
	}
	return nil
}

// stop stops a sandbox's scope; one that is already gone is fine.
func (s *scopes) stop(ctx context.Context, unit string) error {
	err := s.units.Stop(ctx, unit)
	_ = s.units.ResetFailed(ctx, unit)
	if err != nil && !errors.Is(err, units.ErrNotFound) {
		return fmt.Errorf("stopping %s: %w", unit, err)
	}
	return nil
}
