package world

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// A project of several directories (Spec.ProjectDirs: an app and its data,
// adopted together) is one volume that holds each at its own path below
// its root; the sandbox sees each at that path. One volume: its snapshot,
// diff and promotion cover all of them at once.

// projectStage is where the project's volume is attached, out of the
// sandbox's sight, while its directories are bound into the root: in the
// init's own build tmpfs (mountIdmappedOverlay), gone with the pivot.
const projectStage = "/tmp/project"

// mountProjectDirs binds each of dirs, below the project's volume (the
// idmapped mount, or the bind's Source path), at the same path in the
// sandbox. A directory is found below the volume without following a
// symlink (the sandbox made what is in its volume); one the sandbox
// removed is made again, empty.
func mountProjectDirs(r *root, project Bind, dirs []string, mounts *Mounts) error {
	volume := project.Source
	if mounts != nil {
		if err := os.Mkdir(projectStage, 0o700); err != nil {
			return fmt.Errorf("staging the project: %w", err)
		}
		if err := attach(mounts.Project, projectStage); err != nil {
			return fmt.Errorf("staging the project: %w", err)
		}
		volume = projectStage
	}
	vfd, err := unix.Open(volume, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("opening the project's volume: %w", err)
	}
	defer unix.Close(vfd)
	for _, d := range dirs {
		if filepath.Clean(d) != d || !filepath.IsAbs(d) || d == "/" {
			return fmt.Errorf("project directory %q is not an absolute path", d)
		}
		fd, err := beneath(vfd, strings.TrimPrefix(d, "/"))
		if err != nil {
			return fmt.Errorf("project directory %s in the sandbox's volume: %w", d, err)
		}
		err = func() error {
			defer unix.Close(fd)
			if err := r.mkdirAll(d, 0o755); err != nil {
				return err
			}
			dir := Bind{Source: fmt.Sprintf("/proc/self/fd/%d", fd), Target: d, ReadOnly: project.ReadOnly}
			if mounts != nil {
				// An idmapped clone comes without access times (and
				// read-only if the project is) already: a bind keeps it.
				return r.bind(dir.Source, dir.Target, dir.ReadOnly)
			}
			return bindProject(r, dir)
		}()
		if err != nil {
			return fmt.Errorf("mounting project directory %s: %w", d, err)
		}
	}
	return nil
}

// beneath opens directory rel below dir (O_PATH), symlinks refused,
// making it and its parents (0755) where they are missing.
func beneath(dir int, rel string) (int, error) {
	how := &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV,
	}
	fd, err := unix.Openat2(dir, rel, how)
	if !errors.Is(err, unix.ENOENT) {
		return fd, err
	}
	parts := strings.Split(rel, "/")
	for i := range parts {
		sub := strings.Join(parts[:i+1], "/")
		if err := unix.Mkdirat(dir, sub, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
			return -1, err
		}
		// Checked at each step: what was there must be a directory.
		fd, err := unix.Openat2(dir, sub, how)
		if err != nil {
			return -1, err
		}
		if i < len(parts)-1 {
			unix.Close(fd)
			continue
		}
		return fd, nil
	}
	return -1, unix.ENOENT
}
