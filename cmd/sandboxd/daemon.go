package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	sddaemon "github.com/coreos/go-systemd/v22/daemon"
	"github.com/godbus/dbus/v5"

	"github.com/sandboxd/sandboxd/cowfs/pool"
	"github.com/sandboxd/sandboxd/supervisor"
	"github.com/sandboxd/sandboxd/supervisor/adopt"
	"github.com/sandboxd/sandboxd/supervisor/api"
	"github.com/sandboxd/sandboxd/supervisor/api/access"
	"github.com/sandboxd/sandboxd/supervisor/api/guard"
	"github.com/sandboxd/sandboxd/supervisor/audit"
	"github.com/sandboxd/sandboxd/supervisor/caches"
	"github.com/sandboxd/sandboxd/supervisor/checkpoints"
	"github.com/sandboxd/sandboxd/supervisor/commands"
	"github.com/sandboxd/sandboxd/supervisor/config"
	"github.com/sandboxd/sandboxd/supervisor/fork"
	"github.com/sandboxd/sandboxd/supervisor/journal"
	"github.com/sandboxd/sandboxd/supervisor/limits"
	"github.com/sandboxd/sandboxd/supervisor/metrics"
	warmpool "github.com/sandboxd/sandboxd/supervisor/pool"
	"github.com/sandboxd/sandboxd/supervisor/ports"
	"github.com/sandboxd/sandboxd/supervisor/projects"
	"github.com/sandboxd/sandboxd/supervisor/promotion"
	"github.com/sandboxd/sandboxd/supervisor/state"
	"github.com/sandboxd/sandboxd/supervisor/try"
	"github.com/sandboxd/sandboxd/units"
)

// exConfig is sysexits' EX_CONFIG: the configuration is wrong, and
// restarting will not help.
const exConfig = exitCode(78)

// run is the daemon: it opens the pool, the state and the bus, reconciles,
// tells systemd it is ready, and serves until ctx ends. Sandboxes outlive
// it: their scopes are not the daemon's, and the next start adopts them.
func run(ctx context.Context, configPath string) error {
	cfg, err := config.Load(configPath)
	if err != nil {
		return errors.Join(exConfig, err)
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(cfg.Daemon.LogLevel)); err != nil {
		return errors.Join(exConfig, err)
	}
	// A caller's refusals are budgeted: its flood must not spend the
	// journal's rate limit for the daemon's other lines.
	log := slog.New(journal.Budget(journal.NewHandler(os.Stderr, level), journal.BudgetLines, journal.BudgetInterval))
	slog.SetDefault(log)

	status("opening the pool")
	backend, err := pool.Open(ctx, cfg.Storage.Pool())
	if err != nil {
		return fmt.Errorf("opening the pool: %w", err)
	}
	defer backend.Close()
	locations := map[string]string{}
	projectAccess := map[string]projects.Access{}
	projectEnv := map[string]projects.Env{}
	projectIgnore := map[string][]string{}
	for _, p := range cfg.Projects {
		locations[p.Name] = p.Path + p.Dataset // exactly one is set
		projectAccess[p.Name] = projects.Access{Users: p.Users, Groups: p.Groups}
		projectEnv[p.Name] = projects.Env{Units: p.Units, Env: p.Env}
		projectIgnore[p.Name] = p.Ignore
	}
	um, err := units.Connect(ctx)
	if err != nil {
		return fmt.Errorf("connecting to systemd: %w", err)
	}
	defer um.Close()
	store, err := state.Open(filepath.Join(cfg.Daemon.StateDir, "state.db"), 2*time.Second)
	if errors.Is(err, state.ErrLocked) {
		return fmt.Errorf("another sandboxd is running (it holds %s): %w", cfg.Daemon.StateDir, err)
	}
	if err != nil {
		return err
	}
	defer store.Close()
	if r := store.Recovery(); r.CorruptMovedTo != "" || r.Rebuilt > 0 || r.Projects > 0 {
		log.Warn("the state database was rebuilt from its mirror", "corrupt_moved_to", r.CorruptMovedTo, "records", r.Rebuilt, "projects", r.Projects)
	}
	auditLog, err := audit.OpenWith(cfg.Daemon.AuditLog, audit.Options{
		MaxSize: int64(cfg.Daemon.AuditMaxSize), Keep: cfg.Daemon.AuditKeep,
		OnError: func(err error) { log.Error("writing the audit log", "error", err) },
	})
	if err != nil {
		return err
	}
	defer auditLog.Close()
	profs, err := profiles(cfg)
	if err != nil {
		return errors.Join(exConfig, err)
	}
	lim := cfg.Limits
	host := readMachine()
	sup := supervisor.New(supervisor.Config{
		Backend: backend, Units: um, Store: store, Projects: locations, ProjectAccess: projectAccess, ProjectEnv: projectEnv,
		ProjectIgnore: projectIgnore,
		// The init is this binary, reached through /proc/self/exe: the
		// same version as the daemon even while an upgrade replaces the
		// file, and executable by an init that is root of its user
		// namespace only, whatever the modes of the directories above.
		InitCommand: []string{"/proc/self/exe", "sandbox-init"},
		RuntimeDir:  runtimeDir,
		Profiles:    profs, DefaultProfile: cfg.Sandbox.DefaultProfile,
		Hidden: cfg.Sandbox.HiddenPaths, ReadOnly: cfg.Sandbox.ReadonlyPaths,
		Policy: supervisor.Policy{
			MaxSandboxes:         lim.MaxSandboxes,
			MaxPerOwner:          lim.MaxSandboxesPerUser,
			MaxAdoptionsPerOwner: lim.MaxAdoptionsPerUser,
			DestroyOldest:        lim.OnUserLimit == config.OnUserLimitDestroyOldest,
			MaxMemory:            lim.MaxMemory.Of(host.memory),
			DefaultMemoryMax:     uint64(lim.DefaultMemoryMax),
			DefaultTTL:           time.Duration(lim.DefaultTTL),
			MaxTTL:               time.Duration(lim.MaxTTL),
		},
		UserLimits: host.bounds(lim.UserMemoryMax, lim.UserTasksMax),
		IdleFreeze: time.Duration(lim.IdleFreeze),
		IdleStop:   time.Duration(lim.IdleStop),
		Audit:      auditLog,
		Log:        log,
		UserNS: supervisor.UserNS{
			Mode: cfg.Sandbox.UserNS, RootLayers: cfg.Sandbox.RootLayers,
			First: cfg.Sandbox.UserNSFirstID, Count: cfg.Sandbox.UserNSIDCount,
		},
	})
	defer sup.Close()
	// The rooms join the core's hooks as they are made, before the
	// projects load and the sandboxes are reconciled.
	rooms := api.Rooms{}
	rooms.Ports = ports.New(sup.Host(), ports.Config{RuntimeDir: runtimeDir})

	rooms.Caches = caches.New(sup.Host(), caches.Config{Enabled: true, Quota: uint64(lim.CacheQuota)})

	rooms.Commands = commands.New(sup.Host().(commands.Host))

	rooms.Checkpoints = checkpoints.New(sup.Host().(checkpoints.Host), checkpoints.Config{MaxCheckpoints: lim.MaxCheckpoints})

	rooms.Promotion = promotion.New(sup.Host().(promotion.Host), promotion.Config{Stages: stagesOf(cfg), Runner: rooms.Commands})

	rooms.Adoptions = adopt.New(sup.Host().(adopt.Host), adopt.Config{
		// The embedded pool, which only the daemon mounts: adopted
		// volumes bound back at boot need it mounted then too.
		PoolImage: poolImage(cfg), PoolMountpoint: poolMountpoint(cfg),
	})

	rooms.Forks = fork.New(sup.Host().(fork.Host), fork.Config{Commands: rooms.Commands})

	rooms.Try = try.New(sup.Host().(try.Host), try.Config{Runner: rooms.Commands, Forks: rooms.Forks})

	rooms.Limits = limits.New(sup.Host().(limits.Host), limits.Config{
		UserLimits:  host.bounds(lim.UserMemoryMax, lim.UserTasksMax),
		SliceLimits: host.bounds(lim.SliceMemoryMax, lim.SliceTasksMax),
	})

	rooms.Pools = warmpool.New(sup.Host().(warmpool.Host), warmPools(cfg, backend.Info().Root, log))

	// The metrics count what the audit log hears from now on: the
	// reconcile's and the callers' creates, commands and promotions.
	rooms.Metrics = metrics.New(sup.Host().(metrics.Host), metrics.Config{UserMemoryMax: lim.UserMemoryMax.Of(host.memory)})
	auditLog.Observe(rooms.Metrics.Audited)

	if err := sup.ProbeUserNS(ctx); err != nil {
		return errors.Join(exConfig, err)
	}

	// The projects added with AddProject join the configuration's before
	// the reconcile, which may restart sandboxes of theirs.
	shadowed, err := sup.Projects().Load()
	if err != nil {
		return err
	}
	for _, p := range shadowed {
		log.Warn("a project added with AddProject has the name of one in sandboxd.toml: sandboxd.toml's is used, the added one ignored (it returns if sandboxd.toml drops its own)",
			"project", p.Name, "added_location", p.Location, "config_location", locations[p.Name])
	}

	if err := rooms.Limits.ApplyUserLimits(ctx); err != nil {
		log.Error("the limits of all sandboxes and of each user's are not all in force", "error", err)
	}
	status("reconciling sandboxes")
	rep, err := sup.Reconcile(ctx)
	log.Info("reconciled", "adopted", len(rep.Adopted), "restarted", len(rep.Restarted),
		"undone", len(rep.Undone), "finished", len(rep.Finished), "lost", len(rep.Lost), "stopped", len(rep.Stopped),
		"orphan_volumes", strings.Join(rep.OrphanVolumes, ","), "orphan_scopes", strings.Join(rep.OrphanScopes, ","))
	if err != nil {
		// Each sandbox is reconciled on its own: one that fails is
		// reported, the others are served.
		log.Error("reconcile left problems", "error", err)
	}

	conn, err := dbus.ConnectSystemBus(guard.ConnOptions()...)
	if err != nil {
		return fmt.Errorf("connecting to the system bus: %w", err)
	}
	defer conn.Close()
	policy, unresolved := access.Resolve(cfg.Access.CreatorUsers, cfg.Access.CreatorGroups, cfg.Access.AdminUsers, cfg.Access.AdminGroups)
	for _, err := range unresolved {
		log.Warn("an [access] name does not resolve; left out", "error", err)
	}
	srv, err := api.Serve(ctx, conn, sup, rooms, policy, log)
	if err != nil {
		return err
	}
	defer srv.Close()
	// Served once the API is: a scrape sees the sandboxes reconciled.
	msrv, err := serveMetrics(cfg.Metrics, rooms.Metrics, log)
	if err != nil {
		return err
	}
	if msrv != nil {
		defer msrv.Close() // before the API's: last deferred, first run
	}

	list, _ := sup.List(ctx)
	_, _ = sddaemon.SdNotify(false, fmt.Sprintf("READY=1\nSTATUS=serving org.sandboxd1; %d sandboxes", len(list)))
	log.Info("sandboxd ready", "version", version, "backend", backend.Info().Backend, "root", backend.Info().Root, "sandboxes", len(list))

	if interval, err := sddaemon.SdWatchdogEnabled(false); err == nil && interval > 0 {
		go watchdog(ctx, interval/2)
	}
	idle := time.Duration(lim.IdleFreeze) // the first of the idle steps sets the pace
	if st := time.Duration(lim.IdleStop); st > 0 && (idle <= 0 || st < idle) {
		idle = st
	}
	go expire(ctx, sup, log, idle)
	select {
	case <-ctx.Done():
	case <-conn.Context().Done():
		// The bus went away (dbus restarted): no one can reach this
		// connection again. Exit, and systemd (Restart=on-failure)
		// starts the daemon on the new bus; the sandboxes run on.
		return errors.New("the connection to the system bus was lost")
	}
	_, _ = sddaemon.SdNotify(false, "STOPPING=1\nSTATUS=stopping; sandboxes keep running")
	log.Info("sandboxd stopping")
	return nil
}

// status tells systemd what the daemon is doing (systemctl status shows it).
func status(s string) { _, _ = sddaemon.SdNotify(false, "STATUS="+s) }

// expire destroys sandboxes past their time to live, every few seconds,
// and freezes idle ones; the change event tells the bus.
func expire(ctx context.Context, sup *supervisor.Supervisor, log *slog.Logger, idle time.Duration) {
	every := 10 * time.Second
	if idle > 0 && idle/2 < every {
		every = max(idle/2, time.Second) // an idle sandbox freezes within half its time again
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		gone, err := sup.Expire(ctx, time.Now())
		if err != nil {
			log.Error("expiring sandboxes", "error", err)
		}
		frozen, stopped, err := sup.Idle(ctx, time.Now())
		if err != nil {
			log.Error("freezing or stopping idle sandboxes", "error", err)
		}

		if len(gone) > 0 {
			log.Info("sandboxes expired", "ids", strings.Join(gone, ","), "ACTION", "expire")
		}
		if len(frozen) > 0 || len(stopped) > 0 {
			log.Debug("sandboxes frozen or stopped for being idle", "frozen", strings.Join(frozen, ","), "stopped", strings.Join(stopped, ","))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func watchdog(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			_, _ = sddaemon.SdNotify(false, sddaemon.SdNotifyWatchdog)
		}
	}
}

// stagesOf is the configuration's stages as the supervisor runs them.
func stagesOf(cfg *config.Config) []promotion.StageConfig {
	var out []promotion.StageConfig
	for _, st := range cfg.StageList() {
		out = append(out, promotion.StageConfig{
			Name: st.Name, Target: st.Target, Checks: st.Checks,
			CheckTimeout: time.Duration(st.CheckTimeout),
			Admin:        st.Approval == config.ApprovalAdmin,
			SSHOptions:   st.SSHOptions,
		})
	}
	return out
}

// poolImage is the embedded pool's image ("" for another backend).
func poolImage(cfg *config.Config) string {
	if p := cfg.Storage.Pool(); p.Backend == pool.Embedded || p.Backend == "" {
		return p.Image
	}
	return ""
}

// poolMountpoint is where the embedded pool is mounted ("" for another
// backend).
func poolMountpoint(cfg *config.Config) string {
	if poolImage(cfg) == "" {
		return ""
	}
	return cfg.Storage.Pool().Mountpoint
}
