package fork

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/internal/crashpoint"
	"github.com/sandboxd/sandboxd/internal/randid"
	"github.com/sandboxd/sandboxd/internal/revert"
	"github.com/sandboxd/sandboxd/internal/steps"
	"github.com/sandboxd/sandboxd/runtime/nsinit"
	"github.com/sandboxd/sandboxd/sandboxd1"
	"github.com/sandboxd/sandboxd/supervisor"
	"github.com/sandboxd/sandboxd/supervisor/commands"
	"github.com/sandboxd/sandboxd/supervisor/state"
	"github.com/sandboxd/sandboxd/supervisor/volname"
)

// MaxCount bounds one Fork's count.
const MaxCount = sandboxd1.MaxForks

// Bounds of Options.Spawn: command lines per fork, arguments in one, and
// bytes in one (what the daemon holds for the call).
const (
	MaxSpawn      = 8
	maxSpawnArgs  = 256
	maxSpawnBytes = 16 << 10
)

// Host is the core as this room needs it: supervisor.Host, and a
// sandbox made of a source's snapshots (supervisor/host_fork.go).
type Host interface {
	supervisor.Host
	// CreateFork makes a fork of src.Record named name ("": none), as
	// Create makes a sandbox.
	CreateFork(ctx context.Context, src supervisor.ForkSource, name string) (supervisor.Sandbox, error)
}

// Processes is what the room asks of the commands room: a fork's
// background processes started, the source's listed.
type Processes interface {
	Spawn(ctx context.Context, id string, o commands.ExecOptions) (string, error)
	ListProcesses(ctx context.Context, id string) ([]nsinit.Process, error)
}

// Config is what the room is made with.
type Config struct {
	// Commands starts Options.Spawn's processes and lists the source's
	// (the commands room; nil: no Spawn, nothing listed).
	Commands Processes
}

// Forks is the room.
type Forks struct {
	h    Host
	cmds Processes
}

// New makes the room over h. It joins no hook: the forks are the core's
// sandboxes like any other, and a Fork's snapshots live in its call (or,
// after a crash, are the source's unrecorded checkpoints, which Reconcile
// removes).
func New(h Host, cfg Config) *Forks {
	return &Forks{h: h, cmds: cfg.Commands}
}

// Options ask for forks of a sandbox.
type Options struct {
	Count int        // forks to make, 1..MaxCount (0 means 1)
	Names []string   // optional names, at most Count, "" for none
	Spawn [][]string // argv of background processes to start in each fork
}

// Result is a Fork's outcome.
type Result struct {
	Sandboxes  []supervisor.Sandbox // the forks, in order
	NotCarried []string             // the source's running background processes (argv joined), not carried
}

// tempName is the name part of a Fork's snapshots of its source: a
// checkpoint name no caller can give (it starts with '.'), so that the
// snapshots are the source's unrecorded checkpoints, ck-ID-.fork-TAG and
// cks-ID-.fork-TAG.
func tempName() string { return ".fork-" + randid.Hex(4) }

// Fork makes o.Count forks of sandbox id as it stands. Its caller must
// be its owner, root or an admin; each fork is the source's owner's. A
// failure part way destroys the forks made and the snapshots.
func (f *Forks) Fork(ctx context.Context, id string, o Options) (res Result, err error) {
	what := "forking sandbox " + id
	if err := o.check(); err != nil {
		return res, fmt.Errorf("%s: %w", what, err)
	}
	// Its steps go in its journal line, each fork's create in its own.
	timing := steps.New()
	var src supervisor.ForkSource
	defer func() { f.h.Audit(ctx, "fork", src.Record, err) }()
	// A single fork snapshots the source straight into its volumes, where
	// a writable snapshot is one (btrfs); a ZFS clone needs a snapshot
	// to clone, which the temporary ones are.
	take := f.snapshot
	if kind := f.h.Backend().Info().Backend; o.Count == 1 && (kind == "btrfs" || kind == "fake") {
		take = f.held
	}
	if src, err = take(steps.With(ctx, timing), id, what); err != nil {
		return res, err
	}
	dropped := false
	defer func() {
		if !dropped {
			f.dropSnapshots(ctx, src)
		}
	}()
	crashpoint.Hit(crashpoint.ForkSnapshots)
	res.NotCarried = f.running(ctx, id)
	timing.Mark("processes")

	undo := revert.New()
	defer func() { _ = undo.Fail(ctx) }()
	for i := range o.Count {
		name := ""
		if i < len(o.Names) {
			name = o.Names[i]
		}
		sb, err := f.h.CreateFork(ctx, src, name)
		if err != nil {
			return res, fmt.Errorf("%s (fork %d of %d): %w%s", what, i+1, o.Count, err, undoneText(res.Sandboxes))
		}
		undo.Add(func(ctx context.Context) error { return f.h.Destroy(context.WithoutCancel(ctx), sb.ID) })
		res.Sandboxes = append(res.Sandboxes, sb)
		if i == 0 {
			crashpoint.Hit(crashpoint.ForkFirst)
		}
	}
	timing.Mark("creates")
	if err := f.spawn(ctx, res.Sandboxes, o.Spawn); err != nil {
		return res, fmt.Errorf("%s: %w%s", what, err, undoneText(res.Sandboxes))
	}
	crashpoint.Hit(crashpoint.ForkMade)
	undo.Success()
	timing.Mark("spawn")
	dropped = true
	f.dropSnapshots(ctx, src)
	timing.Mark("drop")
	ids := make([]string, len(res.Sandboxes))
	for i, sb := range res.Sandboxes {
		ids[i] = sb.ID
	}
	attrs := []any{"SANDBOX_ID", id, "ACTION", "fork", "forks", strings.Join(ids, " "), "CALLER_UID", callerField(ctx),
		"took_ms", float64(timing.Took().Microseconds()) / 1000, "steps", timing.String()}
	if !f.h.Backend().Info().Capabilities.OverlayUpper {
		// The system layer is a tmpfs there (zfs-fuse): each fork's is new.
		attrs = append(attrs, "system_layer", "not carried")
	}
	f.h.Log().Info("sandbox forked", attrs...)
	return res, nil
}

// source checks, under the source's lock, that the caller may fork
// sandbox id and that its state allows it, and returns its record.
func (f *Forks) source(ctx context.Context, id, what string) (state.Record, error) {
	rec, err := f.h.Store().Get(id)
	if err != nil {
		return rec, fmt.Errorf("%s: %w", what, err)
	}
	a, err := supervisor.ActorOf(ctx)
	if err != nil {
		return rec, fmt.Errorf("%s: %w", what, err)
	}
	if !a.Privileged() && a.UID != rec.Owner {
		return rec, fmt.Errorf("%s: it is uid %d's; only its owner, root or an admin may fork it: %w", what, rec.Owner, supervisor.ErrAccessDenied)
	}
	if !slices.Contains([]state.State{state.Ready, state.Running, state.Frozen, state.Stopped}, rec.State) {
		return rec, fmt.Errorf("%s: it is %s; fork it once it is ready, running, frozen or stopped: %w", what, rec.State, supervisor.ErrWrongState)
	}
	return rec, nil
}

// freeze freezes the source, under its lock, for the instant of its
// snapshots, so that what its processes write is consistent across the
// two, and returns what thaws it. One frozen already (idle, or asked)
// stays so, and one whose init does not run needs none.
func (f *Forks) freeze(ctx context.Context, rec state.Record, what string) (thaw func() error, err error) {
	thaw = func() error { return nil }
	if _, runs := f.h.InitPID(rec.ID); !runs || rec.State == state.Frozen {
		return thaw, nil
	}
	if err := f.h.Units().Freeze(ctx, rec.Unit); err != nil {
		return thaw, fmt.Errorf("%s: freezing it for the snapshots: %w", what, err)
	}
	return func() error {
		if err := f.h.Units().Thaw(context.WithoutCancel(ctx), rec.Unit); err != nil {
			return fmt.Errorf("%s: thawing it after the snapshots: %w", what, err)
		}
		return nil
	}, nil
}

// snapshot takes read-only snapshots of sandbox id's copy of the project
// and its system layer, frozen together if it runs, under its lock. The
// lock is not held after: a fork's create may evict sandboxes of the
// owner, and the snapshots stand alone.
func (f *Forks) snapshot(ctx context.Context, id, what string) (src supervisor.ForkSource, err error) {
	timing := steps.Of(ctx)
	defer f.h.Lock(id)()
	timing.Mark("lock")
	if src.Record, err = f.source(ctx, id, what); err != nil {
		return src, err
	}
	rec := src.Record
	b := f.h.Backend()
	pairs := [][2]string{{rec.Volume, volname.Checkpoint(id, tempName())}}
	if rec.Layer != "" {
		pairs = append(pairs, [2]string{rec.Layer, volname.CheckpointLayer(id, strings.TrimPrefix(pairs[0][1], "ck-"+id+"-"))})
	}
	thaw, err := f.freeze(ctx, rec, what)
	if err != nil {
		return src, err
	}
	timing.Mark("freeze")
	defer func() {
		if terr := thaw(); terr != nil && err == nil {
			f.dropSnapshots(ctx, src)
			err = terr
		}
		timing.Mark("thaw")
	}()
	for i, p := range pairs {
		from, err := b.Get(ctx, p[0])
		if err == nil {
			var v cowfs.Volume
			v, err = b.Snapshot(ctx, from, p[1], true)
			if i == 0 {
				src.Volume = v
			} else {
				src.Layer = v
			}
		}
		if err != nil {
			f.dropSnapshots(ctx, src)
			return src, fmt.Errorf("%s: snapshotting %s: %w", what, p[0], err)
		}
	}
	timing.Mark("snapshots")
	return src, nil
}

// held is the source of a single fork: sandbox id's own volumes, which
// the fork's create snapshots straight into the fork's while Hold holds
// the source (its lock, its state checked again, frozen if it runs):
// no temporary snapshots to take and delete, two commits fewer. The
// lock is not held between: the create's admission may evict sandboxes.
func (f *Forks) held(ctx context.Context, id, what string) (src supervisor.ForkSource, err error) {
	unlock := f.h.Lock(id)
	steps.Of(ctx).Mark("lock")
	src.Record, err = f.source(ctx, id, what)
	unlock()
	if err != nil {
		return src, err
	}
	b := f.h.Backend()
	if src.Volume, err = b.Get(ctx, src.Record.Volume); err == nil && src.Record.Layer != "" {
		src.Layer, err = b.Get(ctx, src.Record.Layer)
	}
	if err != nil {
		return src, fmt.Errorf("%s: %w", what, err)
	}
	src.Hold = func(cctx context.Context) (func() error, error) {
		unlock := f.h.Lock(id)
		rec, err := f.source(ctx, id, what) // the caller's, not the create's (the daemon's)
		if err == nil && (rec.Volume != src.Record.Volume || rec.Layer != src.Record.Layer) {
			err = fmt.Errorf("%s: its volumes changed meanwhile (a start or a rebase); fork it again: %w", what, supervisor.ErrWrongState)
		}
		var thaw func() error
		if err == nil {
			thaw, err = f.freeze(cctx, rec, what)
		}
		if err != nil {
			unlock()
			return nil, err
		}
		steps.Of(cctx).Mark("hold") // in the create's steps
		crashpoint.Hit(crashpoint.ForkHeld)
		var once sync.Once
		var terr error
		return func() error {
			once.Do(func() { terr = thaw(); unlock() })
			return terr
		}, nil
	}
	return src, nil
}

// dropSnapshots deletes a Fork's snapshots of its source; one left
// (logged) is an unrecorded checkpoint, which Reconcile removes.
func (f *Forks) dropSnapshots(ctx context.Context, src supervisor.ForkSource) {
	if src.Hold != nil {
		return // the source's own volumes (held): no snapshots
	}
	for _, v := range []cowfs.Volume{src.Layer, src.Volume} {
		if v.Name == "" {
			continue
		}
		if err := f.h.Backend().Delete(context.WithoutCancel(ctx), v); err != nil {
			f.h.Log().Warn("deleting a fork's snapshot of its source", "SANDBOX_ID", src.Record.ID, "volume", v.Name, "error", err)
		}
	}
}

// running is the source's running background processes, argv joined:
// not carried into the forks. A source whose init does not run has none.
func (f *Forks) running(ctx context.Context, id string) []string {
	if f.cmds == nil {
		return nil
	}
	if _, runs := f.h.InitPID(id); !runs {
		return nil
	}
	ps, err := f.cmds.ListProcesses(ctx, id)
	if err != nil {
		f.h.Log().Warn("listing a forked sandbox's background processes", "SANDBOX_ID", id, "error", err)
		return nil
	}
	var out []string
	for _, p := range ps {
		if p.Running() {
			out = append(out, strings.Join(p.Argv, " "))
		}
	}
	return out
}

// spawn starts each command line in each fork, as the caller.
func (f *Forks) spawn(ctx context.Context, forks []supervisor.Sandbox, argvs [][]string) error {
	if len(argvs) == 0 {
		return nil
	}
	if f.cmds == nil {
		return fmt.Errorf("starting processes in the forks: this daemon serves no commands: %w", supervisor.ErrInvalid)
	}
	uid, ok := supervisor.CallerUID(ctx)
	for _, sb := range forks {
		if !ok {
			uid = sb.Record.Owner // the daemon's own work: as the owner
		}
		for _, argv := range argvs {
			if _, err := f.cmds.Spawn(ctx, sb.Record.ID, commands.ExecOptions{Argv: argv, UID: uid}); err != nil {
				return fmt.Errorf("starting %q in fork %s: %w", strings.Join(argv, " "), sb.Record.ID, err)
			}
		}
	}
	return nil
}

// check validates o and fills in its defaults.
func (o *Options) check() error {
	if o.Count == 0 {
		o.Count = 1
	}
	if o.Count < 1 || o.Count > MaxCount {
		return fmt.Errorf("count %d: make 1 to %d forks at once: %w", o.Count, MaxCount, supervisor.ErrInvalid)
	}
	if len(o.Names) > o.Count {
		return fmt.Errorf("%d names for %d forks: give at most one name a fork (or raise the count): %w", len(o.Names), o.Count, supervisor.ErrInvalid)
	}
	for i, n := range o.Names {
		if n == "" {
			continue
		}
		if err := supervisor.ValidateSandboxName(n); err != nil {
			return fmt.Errorf("name %q: %w: %w", n, err, supervisor.ErrInvalid)
		}
		if slices.Contains(o.Names[:i], n) {
			return fmt.Errorf("name %q is given twice: each fork needs a name of its own: %w", n, supervisor.ErrInvalid)
		}
	}
	if len(o.Spawn) > MaxSpawn {
		return fmt.Errorf("%d processes to start: at most %d a fork: %w", len(o.Spawn), MaxSpawn, supervisor.ErrInvalid)
	}
	for _, argv := range o.Spawn {
		size := 0
		for _, a := range argv {
			size += len(a) + 1
		}
		switch {
		case len(argv) == 0 || argv[0] == "":
			return fmt.Errorf("a process to start has no command: give each a command line: %w", supervisor.ErrInvalid)
		case len(argv) > maxSpawnArgs || size > maxSpawnBytes:
			return fmt.Errorf("a process to start has %d arguments, %d bytes: at most %d and %d: %w", len(argv), size, maxSpawnArgs, maxSpawnBytes, supervisor.ErrInvalid)
		}
	}
	return nil
}

// undoneText says that the forks made were destroyed ("" when none was).
func undoneText(made []supervisor.Sandbox) string {
	if len(made) == 0 {
		return ""
	}
	return fmt.Sprintf("; the %d fork(s) made were destroyed", len(made))
}

// callerField is the caller's uid for the journal, or "daemon".
func callerField(ctx context.Context) string {
	if uid, ok := supervisor.CallerUID(ctx); ok {
		return fmt.Sprint(uid)
	}
	return "daemon"
}
