package world

import (
	"errors"
	"fmt"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Dir is a directory to make in the sandbox, with its owners (ids inside)
// and mode. An Opaque one hides what the host has at its path.
type Dir struct {
	Path   string `json:"path"`
	Mode   uint32 `json:"mode"`
	UID    uint32 `json:"uid"`
	GID    uint32 `json:"gid"`
	Opaque bool   `json:"opaque,omitempty"`
}

// makeStateDirs makes, in the sandbox's upper layer (r), the host's
// directories its namespace may not read (Spec.StateDirs): empty, opaque
// (the overlay looks no further down, where it could not read them), with
// their owners and modes, their parents as the host has them. What the
// sandbox made there already stays as it is.
func makeStateDirs(r *root, dirs []Dir) error {
	for _, d := range dirs {
		if p := filepath.Clean(d.Path); p != d.Path || !filepath.IsAbs(p) || p == "/" {
			return fmt.Errorf("state directory %q is not an absolute path", d.Path)
		}
	}
	return makeDirs(r, dirs)
}

// makeDirs makes each of dirs that is missing (parents first, in order),
// and gives the ones it made their owners, mode and opacity. It acts on
// descriptors: a path is resolved once, inside r.
func makeDirs(r *root, dirs []Dir) error {
	for _, d := range dirs {
		made := true
		err := r.at(filepath.Dir(d.Path), func(parent string) error {
			return unix.Mkdirat(unix.AT_FDCWD, parent+"/"+filepath.Base(d.Path), 0o700)
		})
		if errors.Is(err, unix.EEXIST) {
			made, err = false, nil
		}
		if err != nil {
			return fmt.Errorf("making %s: %w", d.Path, err)
		}
		if !made {
			continue
		}
		fd, err := r.open(d.Path)
		if err != nil {
			return err
		}
		err = setDir(fd, d)
		unix.Close(fd)
		if err != nil {
			return fmt.Errorf("making %s: %w", d.Path, err)
		}
	}
	return nil
}

// setDir gives the directory at fd (O_PATH) d's owners, mode and opacity.
func setDir(fd int, d Dir) error {
	if err := unix.Fchownat(fd, "", int(d.UID), int(d.GID), unix.AT_EMPTY_PATH); err != nil {
		return err
	}
	// Through its magic link, which names the directory itself.
	p := fmt.Sprintf("/proc/self/fd/%d", fd)
	if err := unix.Chmod(p, d.Mode&0o7777); err != nil {
		return err
	}
	if d.Opaque {
		return unix.Setxattr(p, "user.overlay.opaque", []byte("y"), 0)
	}
	return nil
}
