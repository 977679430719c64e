package supervisor

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/supervisor/state"
	"github.com/sandboxd/sandboxd/supervisor/volname"
	"github.com/sandboxd/sandboxd/units"
)

// Report says what Reconcile found and did, by sandbox id (or volume and
// unit name for orphans).
type Report struct {
	Adopted   []string // consistent: volumes, scope and record all there
	Restarted []string // the scope was gone (a reboot): init and scope started again
	Stopped   []string // stopped (Stop, idle): it stays so, its scope ended if a crash left one
	Undone    []string // a create a crash interrupted: what it made is removed
	Finished  []string // a destroy a crash interrupted: completed
	Lost      []string // the sandbox's volume is gone: its record is removed
	// Orphans: sandboxd's volumes and scopes that no record names.
	OrphanVolumes []string
	OrphanScopes  []string
	// Promotions a crash interrupted: rolled back, or found done.
	Promotions []string
}

// Reconcile makes the records, the volumes and the scopes agree, as the
// daemon starts: it adopts what is consistent, finishes or undoes what a
// crash interrupted, restarts scopes that are gone, and removes orphans.
// Only sandboxd's own volumes (base-ID, sb-ID under its root) and scopes
// (sandbox-ID.scope) are touched.
func (s *Supervisor) Reconcile(ctx context.Context) (Report, error) {
	var rep Report
	recs, err := s.cfg.Store.List()
	if err != nil {
		return rep, fmt.Errorf("reconciling: %w", err)
	}
	vols, err := s.cfg.Backend.List(ctx)
	if err != nil {
		return rep, fmt.Errorf("reconciling: %w", err)
	}
	scopes, err := s.cfg.Units.List(ctx, volname.PrefixUnit+"*.scope")
	if err != nil {
		return rep, fmt.Errorf("reconciling: %w", err)
	}
	volByName := map[string]cowfs.Volume{}
	for _, v := range vols {
		volByName[v.Name] = v
	}
	active := map[string]bool{}
	for _, u := range scopes {
		active[u.Name] = u.ActiveState == "active"
	}
	known := map[string]bool{}
	var errs []error
	for _, f := range s.hooks.BeforeReconcile.Funcs() {
		if err := f(ctx, ReconcileView{Records: recs, Volumes: vols, Active: active}); err != nil {
			errs = append(errs, err)
		}
	}
	for _, rec := range recs {
		known[rec.ID] = true
		unlock := s.locks.Lock(rec.ID)
		did, err := s.reconcileOne(ctx, rec, volByName, active)
		unlock()
		if err != nil {
			errs = append(errs, fmt.Errorf("sandbox %s: %w", rec.ID, err))
			continue
		}
		lists := map[string]*[]string{"adopted": &rep.Adopted, "restarted": &rep.Restarted, "undone": &rep.Undone,
			"finished": &rep.Finished, "lost": &rep.Lost, "stopped": &rep.Stopped}
		*lists[did] = append(*lists[did], rec.ID)
		s.log.Info("reconciled", "SANDBOX_ID", rec.ID, "ACTION", "reconcile", "result", did)
	}
	// Promotions a crash interrupted, before the orphans: their rollback
	// points are needed first.
	for _, f := range s.hooks.AfterReconcile.Funcs() {
		if err := f(ctx, &rep); err != nil {
			errs = append(errs, err)
		}
	}
	vols, err = s.cfg.Backend.List(ctx)
	if err != nil {
		return rep, errors.Join(append(errs, fmt.Errorf("reconciling: %w", err))...)
	}
	// Orphan volumes: checkpoints first (snapshots of the sandboxes),
	// then sandboxes (clones of the bases).
	listed := map[string]bool{} // "id/name" of every recorded checkpoint
	for _, rec := range recs {
		for _, c := range rec.Checkpoints {
			listed[rec.ID+"/"+c.Name] = true
		}
	}
	for _, v := range vols {
		id, name, ok := volname.CheckpointOf(v.Name)
		if !ok || !v.Ours || (known[id] && listed[id+"/"+name]) {
			continue
		}
		if err := s.cfg.Backend.Delete(ctx, v); err != nil && !errors.Is(err, cowfs.ErrNotFound) {
			errs = append(errs, fmt.Errorf("removing orphan volume %s: %w", v.Name, err))
			continue
		}
		rep.OrphanVolumes = append(rep.OrphanVolumes, v.Name)
		s.log.Warn("removed an orphan volume", "volume", v.Name, "ACTION", "reconcile")
	}
	// A sandbox's volumes are those its record names: a rebase makes new
	// ones (base-ID-N, sb-ID-N) before the record names them.
	named := map[string]bool{}
	for _, rec := range recs {
		named[rec.Base], named[rec.Volume], named[rec.Layer] = true, true, true
	}
	for _, prefix := range []string{volname.PrefixLayer, volname.PrefixSandbox, volname.PrefixBase} {
		for _, v := range vols {
			_, ok := strings.CutPrefix(v.Name, prefix)
			if !ok || named[v.Name] || !v.Ours {
				continue
			}
			if err := s.cfg.Backend.Delete(ctx, v); err != nil && !errors.Is(err, cowfs.ErrNotFound) {
				errs = append(errs, fmt.Errorf("removing orphan volume %s: %w", v.Name, err))
				continue
			}
			rep.OrphanVolumes = append(rep.OrphanVolumes, v.Name)
			s.log.Warn("removed an orphan volume", "volume", v.Name, "ACTION", "reconcile")
		}
	}
	for _, u := range scopes {
		id := strings.TrimSuffix(strings.TrimPrefix(u.Name, volname.PrefixUnit), ".scope")
		if known[id] {
			continue
		}
		if err := s.scopes.stop(ctx, u.Name); err != nil {
			errs = append(errs, fmt.Errorf("stopping orphan scope %s: %w", u.Name, err))
			continue
		}
		rep.OrphanScopes = append(rep.OrphanScopes, u.Name)
		s.log.Warn("stopped an orphan scope", "unit", u.Name, "ACTION", "reconcile")
	}
	return rep, errors.Join(errs...)
}

func (s *Supervisor) reconcileOne(ctx context.Context, rec state.Record, vols map[string]cowfs.Volume, active map[string]bool) (string, error) {
	switch rec.State {
	case state.Creating:
		return "undone", s.finishDestroy(ctx, rec)
	case state.Destroying:
		return "finished", s.finishDestroy(ctx, rec)
	}
	if _, ok := vols[rec.Volume]; !ok {
		s.log.Error("a sandbox's volume is gone", "SANDBOX_ID", rec.ID, "volume", rec.Volume)
		return "lost", s.finishDestroy(ctx, rec)
	}
	if rec.State == state.Stopped { // a stop or a start a crash interrupted: stopped
		return "stopped", s.endScope(ctx, rec)
	}
	if active[rec.Unit] {
		// The daemon freezes a sandbox for the instant of a snapshot (a
		// checkpoint's, a rebase's): one it died holding stays frozen,
		// its commands hung, unless thawed. Only one recorded frozen
		// stays so. (Thawing a running scope changes nothing.)
		if rec.State != state.Frozen {
			if err := s.cfg.Units.Thaw(ctx, rec.Unit); err != nil {
				s.log.Warn("thawing a sandbox the daemon may have left frozen", "SANDBOX_ID", rec.ID, "error", err)
			}
		}
		if err := s.adoptWorld(ctx, rec); err != nil {
			// An init that does not answer cannot run commands: start
			// the sandbox again.
			s.log.Warn("a sandbox's init does not answer; restarting it", "SANDBOX_ID", rec.ID, "error", err)
		} else {
			return "adopted", nil
		}
	}
	var limits units.Limits
	if err := units.UnmarshalLimits(rec.Limits, &limits); err != nil {
		return "", err
	}
	if err := s.scopes.stop(ctx, rec.Unit); err != nil { // a failed one lingers until reset
		return "", err
	}
	if err := s.startScope(ctx, rec, limits, nil, nil); err != nil {
		return "", err
	}
	// A new scope runs: whatever it was (frozen), the sandbox is ready.
	if rec.State != state.Ready {
		if _, err := s.cfg.Store.Update(rec.ID, func(r *state.Record) error { r.State = state.Ready; return nil }); err != nil {
			return "", err
		}
	}
	return "restarted", nil
}
