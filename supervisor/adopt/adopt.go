package adopt

// Adopting a directory as a project where it lives (issue 18): the host
// goes on seeing it at its path. On the pool's btrfs a subvolume is made
// beside it, filled by reflinks and swapped in by one rename (AdoptSwap);
// elsewhere its files go into a volume of the pool, bound back at its
// path by a mount unit that survives reboots (AdoptMount). Each step is
// recorded first, and a daemon that starts after a crash finishes or
// undoes the step by what the filesystem shows (reconcileAdoptions):
// the directory is whole at its path either way.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/internal/crashpoint"
	"github.com/sandboxd/sandboxd/internal/rootonly"
	"github.com/sandboxd/sandboxd/internal/subtree"
	"github.com/sandboxd/sandboxd/supervisor"
	"github.com/sandboxd/sandboxd/supervisor/projects"
	"github.com/sandboxd/sandboxd/supervisor/state"
)

// Options are who may use an adopted project (none: the directory's
// owner), and whether the services that use the directory are stopped
// for the adoption and started again after.
type Options struct {
	Access       supervisor.ProjectAccess
	RestartUnits bool
	// More are further directories adopted into the same project (its
	// data beside its app: /var/lib/postgresql beside /srv/app), seen
	// each at its own path, snapshotted, diffed and promoted as one.
	More []string
	// Freeze are host services that write the project's directories,
	// frozen while a sandbox's base is snapshotted (a few ms), so that
	// what they wrote is at one point of theirs.
	Freeze []string
	// Caller, for a member of group sandboxd who is not an admin, is its
	// uid: it adopts only a directory of its own, all of whose entries
	// are its own, for itself (Access names no one else), and only it,
	// root and admins may release it.
	Caller *uint32
}

// Adopt makes the directory at path project name, in place: the host
// keeps it at path, and sandboxes show it there.
func (s *Adoptions) Adopt(ctx context.Context, name, path string, o Options) (err error) {
	access := o.Access
	defer func() { s.audit(ctx, "project-adopt", name, path, err) }()
	paths := append([]string{path}, o.More...)
	what := fmt.Sprintf("adopting %s as project %q", strings.Join(paths, ", "), name)
	if err := projects.CheckNew(name, access); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if err := projects.CheckFreezeUnits(o.Freeze); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	// The actor of ctx decides who adopts: a call that names no one is
	// refused; a member who is not an admin adopts as itself.
	a, err := supervisor.ActorOf(ctx)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if !a.Privileged() {
		if o.Caller != nil && *o.Caller != a.UID {
			return fmt.Errorf("%s: uid %d may not adopt for uid %d: %w", what, a.UID, *o.Caller, supervisor.ErrAccessDenied)
		}
		uid := a.UID
		o.Caller = &uid
	}
	if o.Caller != nil {
		if err := ownAccess(*o.Caller, o); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
	}
	pm, ok := s.h.Backend().(cowfs.ProjectMaker)
	if !ok {
		return fmt.Errorf("%s: the %s pool cannot make a project at a path (btrfs can): %w", what, s.h.Backend().Info().Backend, supervisor.ErrInvalidProject)
	}
	owned := false
	for i, p := range paths {
		own, err := s.adoptable(p, o.Caller)
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		owned = owned || own
		for _, q := range paths[:i] {
			if subtree.Within(p, q) || subtree.Within(q, p) {
				return fmt.Errorf("%s: %s and %s are one inside the other: %w", what, p, q, supervisor.ErrInvalidProject)
			}
		}
	}
	held, services, err := s.heldBy(ctx, paths)
	if len(held) == 0 && err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if len(held) > 0 {
		if !o.RestartUnits || err != nil {
			why := "stop them first, or ask for their services to be restarted around it"
			if err != nil {
				why = err.Error()
			}
			return fmt.Errorf("%s: it is in use by %s (its files must not change while they move); %s: %w", what, s.namesWithUnits(ctx, held), why, supervisor.ErrProjectInUse)
		}
		// Stopped now; those that were running started again whatever
		// happens (one that was not stays as it was).
		var again []string
		for _, u := range services {
			if err := s.h.Units().StopService(ctx, u.Name); err != nil {
				s.startServices(again)
				return fmt.Errorf("%s: %w", what, err)
			}
			if running(u.ActiveState) {
				again = append(again, u.Name)
			}
		}
		defer s.startServices(again)
		held, err := holders(paths...)
		if err == nil && len(held) > 0 {
			err = fmt.Errorf("still in use by %s once its services stopped: %w", s.namesWithUnits(ctx, held), supervisor.ErrProjectInUse)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
	}
	onPool, err := pm.OnPool(filepath.Dir(path))
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	ad := &state.Adoption{Path: path, More: o.More, Phase: state.AdoptCopying, Owner: o.Caller}
	location := path
	if owned {
		// In the pool's own directory, not beside a path its owner can
		// rename: the volume is snapshotted by its path for each sandbox.
		root := s.h.Backend().Info().Root
		ad.How, ad.Temp = state.AdoptOwned, filepath.Join(filepath.Dir(root), filepath.Base(root)+"-adopted", name)
		ad.ByUnit = byUnit(paths)
		location = ad.Temp
		for _, p := range paths {
			if err := roomForOwned(ctx, p, o.Caller, filepath.Dir(root)); err != nil {
				return fmt.Errorf("%s: %w", what, err)
			}
		}
	} else if onPool && len(o.More) == 0 {
		ad.How, ad.Temp = state.AdoptSwap, filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".sandboxd-adopt")
	} else {
		root := s.h.Backend().Info().Root
		ad.How, ad.Temp = state.AdoptMount, filepath.Join(filepath.Dir(root), filepath.Base(root)+"-adopted", name)
		location = ad.Temp
		for _, p := range paths {
			if err := roomFor(p, filepath.Dir(root)); err != nil {
				return fmt.Errorf("%s: %w", what, err)
			}
		}
	}
	// The name and the path are taken under the admission lock; the
	// copy runs without it (creates go on), the path marked as adopting.
	rec := state.Project{Name: name, Location: location, Added: time.Now().UTC(), Users: access.Users, Groups: access.Groups, Adoption: ad, Freeze: o.Freeze}
	err = s.h.WithAdmission(func() error {
		if p, taken := s.h.Project(name); taken {
			return fmt.Errorf("%s: %s: %w", what, projects.TakenBy(p), supervisor.ErrExists)
		}
		if err := s.adoptionsLeft(o.Caller); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		for other := range s.adopting {
			for _, p := range paths {
				if subtree.Within(p, other) || subtree.Within(other, p) {
					return fmt.Errorf("%s: %s is being adopted: %w", what, other, supervisor.ErrProjectInUse)
				}
			}
		}
		if err := s.h.Store().AddProject(rec); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		for _, p := range paths {
			s.adopting[p] = true
		}
		return nil
	})
	if err != nil {
		return err
	}
	defer func() {
		_ = s.h.WithAdmission(func() error {
			for _, p := range paths {
				delete(s.adopting, p)
			}
			return nil
		})
	}()
	// The services that write it are frozen while its files move: the
	// copy is of one point of theirs (one that only opens a file now and
	// then is not among the holders above).
	thaw := s.h.FreezeUnits(ctx, name, o.Freeze)
	err = s.adopt(ctx, pm, &rec)
	thaw()
	if err != nil {
		// Undone now; a crash instead is undone by the next start.
		if uerr := s.undoAdoption(ctx, pm, rec); uerr != nil {
			return errors.Join(fmt.Errorf("%s: %w", what, err), fmt.Errorf("undoing it: %w", uerr))
		}
		return fmt.Errorf("%s: %w", what, err)
	}
	_ = s.h.WithAdmission(func() error {
		s.h.LoadProject(rec)
		return nil
	})
	s.h.Log().Info("project adopted", "ACTION", "project-adopt", "CALLER_UID", uidField(ctx), "project", name, "path", strings.Join(paths, ":"), "how", ad.How)
	return nil
}

// startServices starts the services stopped for an adoption, logging a
// failure (the adoption's own result is the caller's).
func (s *Adoptions) startServices(services []string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for _, u := range services {
		if err := s.h.Units().StartService(ctx, u); err != nil {
			s.h.Log().Error("starting a service again after an adoption", "unit", u, "error", err)
		}
	}
}

// adopt takes rec's adoption from copying to done.
func (s *Adoptions) adopt(ctx context.Context, pm cowfs.ProjectMaker, rec *state.Project) error {
	ad := rec.Adoption
	if ad.How == state.AdoptOwned {
		return s.adoptOwned(ctx, pm, rec)
	}
	if ad.How == state.AdoptMount {
		if err := os.MkdirAll(filepath.Dir(ad.Temp), 0o700); err != nil {
			return err
		}
	}
	if _, err := pm.MakeProject(ctx, ad.Temp); err != nil {
		return err
	}
	for _, p := range ad.Paths() {
		to := ad.InVolume(ad.Temp, p)
		if err := os.MkdirAll(to, 0o755); err != nil {
			return err
		}
		if err := copyTree(ctx, p, to, ad.How == state.AdoptSwap); err != nil {
			return err
		}
	}
	if err := s.copied(ctx, rec); err != nil {
		return err
	}
	if ad.How == state.AdoptSwap {
		// One rename: the directory is either the old one or the new.
		if err := unix.Renameat2(unix.AT_FDCWD, ad.Temp, unix.AT_FDCWD, ad.Path, unix.RENAME_EXCHANGE); err != nil {
			return fmt.Errorf("swapping the volume in at %s: %w", ad.Path, err)
		}
	} else if err := s.bindAdopted(ctx, ad); err != nil {
		return err
	}
	crashpoint.Hit(crashpoint.AdoptSwitched)
	return s.finishAdoption(rec)
}

// copied moves rec's adoption, its files copied, to its switching
// phase: refused if one of its directories came into use meanwhile.
func (s *Adoptions) copied(ctx context.Context, rec *state.Project) error {
	ad := rec.Adoption
	crashpoint.Hit(crashpoint.AdoptCopied)
	held, err := holders(ad.Paths()...)
	if err == nil && len(held) > 0 {
		err = fmt.Errorf("it came into use while its files were copied, by %s: %w", s.namesWithUnits(ctx, held), supervisor.ErrProjectInUse)
	}
	if err != nil {
		return err
	}
	ad.Phase = state.AdoptSwitching
	if err := s.h.Store().UpdateProject(*rec); err != nil {
		return err
	}
	crashpoint.Hit(crashpoint.AdoptSwitching)
	return nil
}

// bindAdopted binds each of ad's directories in the volume back at its
// path, by a mount unit; one bound already stays as it is.
func (s *Adoptions) bindAdopted(ctx context.Context, ad *state.Adoption) error {
	if err := s.poolAtBoot(ctx); err != nil {
		return err
	}
	for i, p := range ad.Paths() {
		if _, err := s.h.Units().BindMount(ctx, ad.InVolume(ad.Temp, p), p); err != nil {
			return err
		}
		if i == 0 && len(ad.More) > 0 {
			crashpoint.Hit(crashpoint.AdoptBoundOne)
		}
	}
	return nil
}

// poolAtBoot makes the embedded pool's mount a unit enabled for boot
// (units.PoolMount): the units that bind adopted volumes back at boot,
// before the services that use them, find their sources then. Another
// pool is the administrator's, mounted at boot as the machine's disks
// are (fstab); the daemon mounts only the embedded one, after
// local-fs.target.
func (s *Adoptions) poolAtBoot(ctx context.Context) error {
	if s.cfg.PoolImage == "" {
		return nil
	}
	_, err := s.h.Units().PoolMount(ctx, s.cfg.PoolImage, s.cfg.PoolMountpoint)
	return err
}

// finishAdoption removes what the directory was (now beside it, after a
// swap) and records the adoption done.
func (s *Adoptions) finishAdoption(rec *state.Project) error {
	ad := rec.Adoption
	if ad.How == state.AdoptSwap {
		if err := os.RemoveAll(ad.Temp); err != nil {
			s.h.Log().Warn("removing an adopted directory's old files", "path", ad.Temp, "error", err)
		}
		ad.Temp = ""
	}
	ad.Phase = state.AdoptDone
	return s.h.Store().UpdateProject(*rec)
}

// undoAdoption takes back an adoption that did not switch: its volume
// goes, its record goes; the directory was never touched.
func (s *Adoptions) undoAdoption(ctx context.Context, pm cowfs.ProjectMaker, rec state.Project) error {
	ad := rec.Adoption
	var errs []error
	switch ad.How {
	case state.AdoptMount:
		for _, p := range ad.Paths() {
			errs = append(errs, s.h.Units().RemoveMount(ctx, p))
		}
	case state.AdoptOwned:
		for _, p := range ad.Paths() {
			errs = append(errs, s.unmountOwned(ctx, ad, ad.Temp, p))
		}
	}
	if _, err := os.Lstat(ad.Temp); err == nil {
		errs = append(errs, pm.RemoveProject(ctx, ad.Temp))
	}
	errs = append(errs, s.h.Store().DeleteProject(rec.Name))
	return errors.Join(errs...)
}

// reconcileAdoptions finishes or undoes the adoptions a crash left half
// way, by what the filesystem shows, and returns the projects they make.
func (s *Adoptions) reconcileAdoptions(ctx context.Context, recs []state.Project) []state.Project {
	pm, _ := s.h.Backend().(cowfs.ProjectMaker)
	var out []state.Project
	for _, rec := range recs {
		ad := rec.Adoption
		if ad != nil && ad.Phase == state.AdoptDone && (ad.How == state.AdoptMount || len(ad.ByUnit) > 0) {
			// Adopted before the pool was mounted at boot: from now on.
			if err := s.poolAtBoot(ctx); err != nil {
				s.h.Log().Error("making the pool mounted at boot, for an adopted project's mount unit", "project", rec.Name, "error", err)
			}
		}
		if ad != nil && ad.How == state.AdoptOwned && ad.Phase == state.AdoptDone {
			// Its mounts by descriptor are the daemon's to make again
			// (after a reboot); its units' are checked.
			for _, p := range ad.Paths() {
				if err := s.mountOwned(ctx, ad, rec.Location, p, nil); err != nil {
					s.h.Log().Error("mounting an adopted project at its path", "project", rec.Name, "path", p, "error", err)
				}
			}
		}
		if ad == nil || ad.Phase == state.AdoptDone {
			out = append(out, rec)
			continue
		}
		if pm == nil {
			s.h.Log().Error("an adoption was left half way, and the pool cannot finish it", "project", rec.Name, "path", ad.Path)
			continue
		}
		if err := rootonly.Check(ad.Path); err != nil && ad.How != state.AdoptOwned {
			// Someone else can rename what root would act on: neither
			// finished nor undone by the daemon, but told.
			s.h.Log().Error("an adoption was left half way, at a path others can change; left for an administrator", "project", rec.Name, "path", ad.Path, "error", err)
			continue
		}
		if ad.Phase == state.AdoptReleasing {
			err := s.releaseFiles(ctx, rec)
			s.h.Log().Warn("a release was left half way by a crash; finished", "project", rec.Name, "path", ad.Path, "error", err)
			continue
		}
		switched := false
		if ad.Phase == state.AdoptSwitching {
			switch ad.How {
			case state.AdoptSwap:
				switched, _ = pm.IsVolume(ad.Path)
			case state.AdoptOwned:
				switched = slices.ContainsFunc(ad.Paths(), func(p string) bool { return ownedMounted(ad, ad.Temp, p) })
			default:
				switched = slices.ContainsFunc(ad.Paths(), mountedAt)
			}
		}
		var err error
		if switched {
			// Past the copy: each directory bound back (of several, some
			// may not be yet), then done.
			switch ad.How {
			case state.AdoptMount:
				err = s.bindAdopted(ctx, ad)
			case state.AdoptOwned:
				for _, p := range ad.Paths() {
					err = errors.Join(err, s.mountOwned(ctx, ad, ad.Temp, p, nil))
				}
			}
			if err == nil {
				err = s.finishAdoption(&rec)
			}
		} else {
			err = s.undoAdoption(ctx, pm, rec)
		}
		s.h.Log().Warn("an adoption was left half way by a crash", "project", rec.Name, "path", ad.Path, "finished", switched, "error", err)
		if switched && err == nil {
			out = append(out, rec)
		}
	}
	return out
}

// copyTree copies what dir holds into to, keeping owners, modes, times,
// hard links, xattrs and ACLs, sockets and holes (cp -a; with reflink,
// sharing the blocks, which the pool's btrfs does).
func copyTree(ctx context.Context, dir, to string, reflink bool) error {
	// cp takes --sparse with an automatic reflink only.
	mode := []string{"--reflink=auto", "--sparse=always"}
	if reflink {
		mode = []string{"--reflink=always"}
	}
	args := append(append([]string{"-a"}, mode...), "--", dir+"/.", to+"/")
	out, err := exec.CommandContext(ctx, "cp", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("copying %s into %s: %w: %s", dir, to, err, strings.TrimSpace(string(out)))
	}
	return nil
}
