package adopt

import (
	"context"
	"errors"
	"fmt"
	"github.com/sandboxd/sandboxd/internal/fsat"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/internal/crashpoint"
	"github.com/sandboxd/sandboxd/internal/rootonly"
	"github.com/sandboxd/sandboxd/supervisor"
	"github.com/sandboxd/sandboxd/supervisor/state"
)

// Release undoes the adoption of project name: its path becomes a
// plain directory again holding the project's files as they are, and the
// project is gone. It takes a project with no sandboxes. The project is
// forgotten and the release recorded first: a daemon that starts after a
// crash finishes it.
// The actor of ctx decides: a call that names no one is refused, and
// one made by a member who is not an admin is ReleaseOwn.
func (s *Adoptions) Release(ctx context.Context, name string) error {
	a, err := supervisor.ActorOf(ctx)
	if err != nil {
		return fmt.Errorf("releasing project %q: %w", name, err)
	}
	if !a.Privileged() {
		return s.releaseProject(ctx, name, &a.UID)
	}
	return s.releaseProject(ctx, name, nil)
}

// ReleaseOwn is Release for a member who is not an admin:
// only a project it adopted itself (of its own directory) is released.
func (s *Adoptions) ReleaseOwn(ctx context.Context, name string, uid uint32) error {
	a, err := supervisor.ActorOf(ctx)
	if err != nil {
		return fmt.Errorf("releasing project %q: %w", name, err)
	}
	if !a.Privileged() && a.UID != uid {
		return fmt.Errorf("releasing project %q: uid %d may not release for uid %d: %w", name, a.UID, uid, supervisor.ErrAccessDenied)
	}
	return s.releaseProject(ctx, name, &uid)
}

// releaseProject is Release; with caller, only of a project that
// caller adopted.
func (s *Adoptions) releaseProject(ctx context.Context, name string, caller *uint32) (err error) {
	what := fmt.Sprintf("releasing project %q", name)
	path := ""
	defer func() { s.audit(ctx, "project-release", name, path, err) }()
	// The directory's users are looked for before the admission lock is
	// taken: the walk looks at every process's threads and descriptors,
	// which any user may make many of (maxWalk), and every create waits
	// on that lock. The lock keeps no process from using the directory:
	// nothing is lost by walking without it.
	var rec state.Project
	err = s.h.WithAdmission(func() (err error) {
		rec, err = s.adoptedRecord(name)
		return err
	})
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	ad := rec.Adoption
	path = ad.Path
	if err := mayRelease(ad, caller); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	for _, p := range ad.Paths() {
		if ad.How == state.AdoptOwned {
			break // acted on by descriptor (adopt_owned.go)
		}
		if err := rootonly.Check(p); err != nil {
			return fmt.Errorf("%s: %v; root acts on it by name, so only root may be able to change it, up to /: %w", what, err, supervisor.ErrInvalidProject)
		}
	}
	held, err := holders(ad.Paths()...)
	if err == nil && len(held) > 0 {
		err = fmt.Errorf("%s is in use by %s; stop them first: %w", ad.Path, s.namesWithUnits(ctx, held), supervisor.ErrProjectInUse)
	}
	if err == nil && ad.How == state.AdoptOwned {
		err = copyableBack(ctx, rec)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	err = s.h.WithAdmission(func() error {
		again, err := s.adoptedRecord(name)
		if err == nil && (again.Adoption.Phase != ad.Phase || !slices.Equal(again.Adoption.Paths(), ad.Paths())) {
			err = fmt.Errorf("it changed while its users were looked for; try again: %w", supervisor.ErrProjectInUse)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		if err := mayRelease(again.Adoption, caller); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		rec, ad = again, again.Adoption
		// Under the admission lock every create of it has recorded its
		// intent, so none is missed, and none comes after.
		if n, err := s.sandboxesOf(name); err != nil || n > 0 {
			if err != nil {
				return fmt.Errorf("%s: %w", what, err)
			}
			return fmt.Errorf("%s: %d sandboxes of project %q exist; destroy them first: %w", what, n, name, supervisor.ErrProjectInUse)
		}
		ad.Phase = state.AdoptReleasing
		if err := s.h.Store().UpdateProject(rec); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		s.h.ForgetProject(name)
		return nil
	})
	if err != nil {
		return err
	}
	crashpoint.Hit(crashpoint.ReleaseRecorded)
	if err := s.releaseFiles(ctx, rec); err != nil {
		return fmt.Errorf("%s: %w (the next start of sandboxd finishes it)", what, err)
	}
	s.h.Log().Info("project released", "ACTION", "project-release", "CALLER_UID", uidField(ctx), "project", name, "path", ad.Path)
	return nil
}

// mayRelease refuses caller (a member, not an admin) the release of an
// adoption it did not make of its own directory.
func mayRelease(ad *state.Adoption, caller *uint32) error {
	if caller == nil || ad.Owner != nil && *ad.Owner == *caller {
		return nil
	}
	return fmt.Errorf("uid %d did not adopt it (a member releases only its own adoptions; root and admins release any): %w", *caller, supervisor.ErrAccessDenied)
}

// adoptedRecord is the record of adopted project name.
func (s *Adoptions) adoptedRecord(name string) (state.Project, error) {
	if _, ok := s.h.Project(name); !ok {
		return state.Project{}, supervisor.ErrUnknownProject
	}
	recs, err := s.h.Store().Projects()
	if err != nil {
		return state.Project{}, err
	}
	for _, r := range recs {
		if r.Name == name && r.Adoption != nil {
			return r, nil
		}
	}
	return state.Project{}, fmt.Errorf("it was not adopted (remove it with `sandboxctl project remove`): %w", supervisor.ErrInvalidProject)
}

// sandboxesOf counts the sandboxes of project name, in any state.
func (s *Adoptions) sandboxesOf(name string) (int, error) {
	recs, err := s.h.Store().List()
	if err != nil {
		return 0, err
	}
	n := 0
	for _, r := range recs {
		if r.Project == name {
			n++
		}
	}
	return n, nil
}

// releaseFiles moves rec's files back into a plain directory at its path and
// drops its record. Each step is one a crash may cut: run again, it
// takes up from what the filesystem shows.
func (s *Adoptions) releaseFiles(ctx context.Context, rec state.Project) error {
	ad := rec.Adoption
	pm, ok := s.h.Backend().(cowfs.ProjectMaker)
	if !ok {
		return errors.New("the pool cannot remove a project volume at a path")
	}
	if ad.How == state.AdoptOwned {
		return s.releaseOwned(ctx, pm, rec)
	}
	if ad.How == state.AdoptSwap {
		plain := filepath.Join(filepath.Dir(ad.Path), "."+filepath.Base(ad.Path)+".sandboxd-release")
		if vol, _ := pm.IsVolume(ad.Path); vol {
			if err := os.RemoveAll(plain); err != nil { // a copy a crash cut short
				return err
			}
			if err := os.Mkdir(plain, 0o700); err != nil {
				return err
			}
			if err := copyTree(ctx, ad.Path, plain, true); err != nil {
				return err
			}
			crashpoint.Hit(crashpoint.ReleaseCopied)
			if err := unix.Renameat2(unix.AT_FDCWD, plain, unix.AT_FDCWD, ad.Path, unix.RENAME_EXCHANGE); err != nil {
				return fmt.Errorf("swapping a plain directory in at %s: %w", ad.Path, err)
			}
		}
		crashpoint.Hit(crashpoint.ReleaseSwitched)
		if vol, _ := pm.IsVolume(plain); vol {
			if err := pm.RemoveProject(ctx, plain); err != nil {
				return err
			}
		}
		return s.h.Store().DeleteProject(rec.Name)
	}
	_, err := os.Lstat(rec.Location)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	volume := err == nil
	for _, p := range ad.Paths() {
		if err := s.h.Units().RemoveMount(ctx, p); err != nil {
			return err
		}
		if !volume {
			continue
		}
		// The directory under the mount holds the files as they were
		// when adopted: it takes the project's as they are now.
		if err := fsat.EmptyDir(ctx, p, supervisor.ErrBusy); err != nil {
			return err
		}
		if err := copyTree(ctx, ad.InVolume(rec.Location, p), p, false); err != nil {
			return err
		}
	}
	return s.released(ctx, pm, rec, volume)
}

// released ends a release whose directories have their files back: the
// volume at rec's location goes, if there is one, then the record.
func (s *Adoptions) released(ctx context.Context, pm cowfs.ProjectMaker, rec state.Project, volume bool) error {
	if volume {
		crashpoint.Hit(crashpoint.ReleaseCopied)
		crashpoint.Hit(crashpoint.ReleaseSwitched)
		if err := pm.RemoveProject(ctx, rec.Location); err != nil {
			return err
		}
	}
	return s.h.Store().DeleteProject(rec.Name)
}
