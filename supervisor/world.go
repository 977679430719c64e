package supervisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/internal/connbound"
	"github.com/sandboxd/sandboxd/internal/pidwatch"
	"github.com/sandboxd/sandboxd/runtime/egress"
	"github.com/sandboxd/sandboxd/runtime/nsinit"
	"github.com/sandboxd/sandboxd/supervisor/diskquota"
	"github.com/sandboxd/sandboxd/supervisor/idmap"
	"github.com/sandboxd/sandboxd/supervisor/state"
	"github.com/sandboxd/sandboxd/supervisor/userns"
	"github.com/sandboxd/sandboxd/supervisor/volname"
)

// ProxyAddr is where a sandbox under an allowlist finds the daemon's
// filtering proxy, on its own loopback.
const ProxyAddr = "127.0.0.1:3128"

// volname.Layer is the volume that holds a sandbox's system layer (what it
// writes to /usr, /etc, ...), where the pool can carry one.

// runtimeDir is the sandbox's directory for its init (root mountpoint,
// control socket).
func (w *worlds) dir(id string) string { return filepath.Join(w.root, id) }

// world is what the daemon holds of a live sandbox's init: its pid, the
// watch of its end (a pidfd), and the proxy it serves into its network
// namespace.
type world struct {
	pid       int
	proc      *pidwatch.Process
	stopProxy func() // nil: none
}

type worlds struct {
	// root holds each live sandbox's runtime directory (Config.RuntimeDir).
	root string
	// initCommand starts an init (Config.InitCommand).
	initCommand []string
	log         *slog.Logger
	// ended hears of a sandbox whose init ended by itself (the change
	// event): its state is stopped from then on (current).
	ended func(id string)

	mu sync.Mutex
	m  map[string]*world
	// egress counts the connections through all the sandboxes' proxies,
	// by owner and in all (egress.MaxConnsPerOwner, egress.MaxConnsAll).
	egress connbound.Counter
}

func (w *worlds) get(id string) *world {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.m[id]
}

func (w *worlds) set(id string, x *world) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m == nil {
		w.m = map[string]*world{}
	}
	w.m[id] = x
	go func() {
		if <-x.proc.Done(); x.proc.Ended() && w.get(id) == x {
			w.ended(id)
		}
	}()
}

// drop forgets a sandbox's world and stops its proxy.
func (w *worlds) drop(id string) {
	w.mu.Lock()
	x := w.m[id]
	delete(w.m, id)
	w.mu.Unlock()
	if x != nil {
		x.proc.Stop()
	}
	if x != nil && x.stopProxy != nil {
		x.stopProxy()
	}
}

// forget forgets sandbox id's init: its proxy stops, and the rooms hear
// of it (Stopped).
func (s *Supervisor) forget(id string) {
	s.worlds.drop(id)
	for _, f := range s.hooks.Stopped.Funcs() {
		f(id)
	}
}

// spec is the world of sandbox rec: the host's OS under its own layer,
// its copy of the project at the project's path, and what it must not see.
func (s *Supervisor) spec(ctx context.Context, rec state.Record) (nsinit.Spec, error) {
	location := s.projects.Location(rec.Project)
	if location == "" { // removed since (a stopped sandbox's start)
		return nsinit.Spec{}, fmt.Errorf("its project %q is gone: add the project again to run the sandbox, or destroy it: %w", rec.Project, ErrUnknownProject)
	}
	project, err := s.cfg.Backend.Project(ctx, location)
	if err != nil {
		return nsinit.Spec{}, err
	}
	vol, err := s.cfg.Backend.Get(ctx, rec.Volume)
	if err != nil {
		return nsinit.Spec{}, err
	}
	spec := nsinit.Spec{
		ID:       rec.ID,
		Hostname: volname.PrefixUnit + rec.ID,
		Dir:      s.worlds.dir(rec.ID),
		Project:  nsinit.Bind{Source: vol.Path, Target: s.projects.SeenAt(rec.Project, project), ReadOnly: rec.ReadOnlyProject},
		Hidden:   slices.Clone(rec.Hidden),
		ReadOnly: rec.ReadOnly,
		Network:  rec.Network,
	}
	if rec.Layer != "" {
		layer, err := s.cfg.Backend.Get(ctx, rec.Layer)
		if err != nil {
			return nsinit.Spec{}, err
		}
		spec.Layer = layer.Path
	} else {
		spec.LayerSize = diskquota.Share(rec.DiskQuota) // the volume has the rest
	}
	// Where the pool or the other projects show through the host's root
	// (a pool on the root filesystem), they are hidden: the sandbox sees
	// its own copy of its own project, nothing else of the pool.
	if root := s.cfg.Backend.Info().Root; filepath.IsAbs(root) {
		spec.Hidden = append(spec.Hidden, root)
	}
	if rec.IDs != nil {
		spec.StateDirs = s.stateDirs.Of(rec)
		for _, p := range userns.Hidden {
			if !slices.Contains(spec.Hidden, p) {
				spec.Hidden = append(spec.Hidden, p)
			}
		}
	}
	for _, p := range s.projects.List() {
		if p.Name == rec.Project {
			if len(p.At) > 1 {
				spec.ProjectDirs = p.At
			}
			continue
		}
		// An adopted one's directory shows, through the host's root, what
		// it held before (its mount is not in the root's layer).
		for _, at := range p.Places() {
			if filepath.IsAbs(at) {
				spec.Hidden = append(spec.Hidden, at)
			}
		}
	}
	return spec, nil
}

// makeLayer makes the volume of a sandbox's system layer, where the pool
// can carry an overlay's upper layer; elsewhere the layer is a tmpfs.
func makeLayer(ctx context.Context, b cowfs.Backend, rec *state.Record, fork *ForkSource) (cowfs.Volume, bool, error) {
	if !b.Info().Capabilities.OverlayUpper {
		return cowfs.Volume{}, false, nil
	}
	var v cowfs.Volume
	var err error
	if fork != nil && fork.Layer.Name != "" {
		v, err = b.Snapshot(ctx, fork.Layer, volname.Layer(rec.ID), false) // a fork's: its source's as it stood
	} else {
		v, err = b.Create(ctx, volname.Layer(rec.ID))
	}
	if err != nil {
		return v, false, err
	}
	rec.Layer = v.Name
	return v, true, nil // bounded with the volume (diskquota.Bound)
}

// launch starts a sandbox's init, which waits for its world (startScope):
// Create launches it first, so that the program's start overlaps the
// snapshots.
func (w *worlds) launch(rec state.Record) (*nsinit.Init, error) {
	if len(w.initCommand) == 0 {
		return nil, errors.New("no init command configured")
	}
	return nsinit.Launch(w.initCommand, rec.Network, idmap.ForInit(rec.IDs))
}

// idmapMounts are the mounts an init in a user namespace builds its world
// from (nil for one without): the root layers, the sandbox's layer and
// its project, idmapped to its namespace.
func (s *Supervisor) idmapMounts(init *nsinit.Init, rec state.Record, spec nsinit.Spec) (*nsinit.Mounts, error) {
	if rec.IDs == nil {
		return nil, nil
	}
	if spec.Layer == "" {
		return nil, fmt.Errorf("sandbox %s has a user namespace but no system layer volume: %w", rec.ID, ErrNoIdmap)
	}
	m, err := init.IdmapMounts(s.cfg.InitCommand, idmap.Shown(rec), s.cfg.UserNS.RootLayers, spec.Layer, spec.Project.Source, spec.Project.ReadOnly, spec.Cache)
	if err != nil {
		return nil, fmt.Errorf("idmapping sandbox %s's mounts: %w", rec.ID, err)
	}
	for _, f := range s.hooks.Idmapped.Funcs() {
		f(rec, m)
	}
	return m, nil
}

// startProxy serves the allowlist's proxy on the sandbox's loopback.
func (ws *worlds) startProxy(rec state.Record, w *world) (err error) {
	if rec.Network == nsinit.NetworkAllowlist {
		w.stopProxy, err = egress.ServeSandbox(egress.Sandbox{ID: rec.ID, Owner: rec.Owner, Allow: rec.Allow,
			PID: w.pid, Addr: ProxyAddr, Conns: &ws.egress, Log: ws.log})
	}
	return err
}

// adoptWorld finds the init of a sandbox that outlived a daemon restart,
// and serves its proxy again.
func (s *Supervisor) adoptWorld(ctx context.Context, rec state.Record) error {
	pid, err := nsinit.PeerPID(ctx, nsinit.Control(s.worlds.dir(rec.ID)))
	if err != nil {
		return err
	}
	// A pool served by a process that restarted (zfs-fuse) leaves the
	// sandbox's files behind a dead FUSE mount: start it again.
	if project, err := s.cfg.Backend.Project(ctx, s.projects.Location(rec.Project)); err == nil {
		var st syscall.Statfs_t
		at := s.projects.SeenAt(rec.Project, project)
		if err := syscall.Statfs(fmt.Sprintf("/proc/%d/root%s", pid, at), &st); errors.Is(err, syscall.ENOTCONN) {
			return fmt.Errorf("its files at %s are unreachable: %w", at, err)
		}
	}
	// Its end is watched from here: it is not the daemon's child (after
	// a restart, systemd reaps it), and answered as pid just now.
	proc, err := pidwatch.Watch(pid, false)
	if err != nil {
		return err
	}
	w := &world{pid: pid, proc: proc}
	if err := s.worlds.startProxy(rec, w); err != nil {
		proc.Stop()
		return err
	}
	s.worlds.set(rec.ID, w)
	s.hooks.started(ctx, Started{Record: rec, PID: pid, Adopted: true})
	return nil
}

// removeWorld forgets a stopped sandbox's init and removes its runtime
// directory.
func (s *Supervisor) removeWorld(id string) error {
	s.forget(id)
	dir := s.worlds.dir(id)
	_ = os.Remove(nsinit.Control(dir))
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("removing %s: %w", dir, err)
	}
	return nil
}

// current is rec as it is now: a live sandbox whose init is gone (killed,
// or dead by itself) is stopped, though its record says otherwise until
// the daemon's next start starts it again (Reconcile).
func (w *worlds) current(rec state.Record) state.Record {
	rec.State = w.currentState(rec.ID, rec.State)
	return rec
}

// currentState is what current says of a sandbox's state st.
func (w *worlds) currentState(id string, st state.State) state.State {
	if st == state.Ready || st == state.Running || st == state.Frozen {
		if x := w.get(id); x != nil && x.proc.Ended() {
			return state.Stopped
		}
	}
	return st
}

// Close ends the promotions running in the background and waits for them
// (the store may be closed after it), then stops the proxies this daemon
// serves and the ports it exposes (its next start exposes them again);
// the sandboxes run on.
func (s *Supervisor) Close() {
	// Last made, first closed (as defers run): the rooms made over
	// others (promotion over commands, ports) end before those.
	for _, f := range slices.Backward(s.hooks.Close.Funcs()) {
		f()
	}
	s.worlds.mu.Lock()
	ids := make([]string, 0, len(s.worlds.m))
	for id := range s.worlds.m {
		ids = append(ids, id)
	}
	s.worlds.mu.Unlock()
	for _, id := range ids {
		s.forget(id)
	}
}
