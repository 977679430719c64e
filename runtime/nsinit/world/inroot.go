package world

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// root is the new root while it is built, before pivot_root. Paths inside
// it are resolved by the kernel as if it were already the root
// (RESOLVE_IN_ROOT): the sandbox's own layer may hold symlinks from an
// earlier life (`/opt -> /`), and those must not send a mount elsewhere.
type root struct {
	fd   int
	path string
}

func openRoot(path string) (*root, error) {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("opening the new root %s: %w", path, err)
	}
	return &root{fd: fd, path: path}, nil
}

func (r *root) close() { unix.Close(r.fd) }

// rel is p (absolute, as seen inside) relative to the root.
func rel(p string) string {
	p = strings.TrimLeft(filepath.Clean("/"+p), "/")
	if p == "" {
		return "."
	}
	return p
}

// open resolves p inside the root to an O_PATH descriptor; the last
// element is not followed if it is a symlink.
func (r *root) open(p string) (int, error) {
	fd, err := unix.Openat2(r.fd, rel(p), &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_CLOEXEC | unix.O_NOFOLLOW,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return -1, &os.PathError{Op: "resolve", Path: p, Err: err}
	}
	return fd, nil
}

// resolve is where p leads inside the root, symlinks followed (as the
// root sees them): an absolute path inside the root.
func (r *root) resolve(p string) (string, error) {
	fd, err := unix.Openat2(r.fd, rel(p), &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return "", &os.PathError{Op: "resolve", Path: p, Err: err}
	}
	defer unix.Close(fd)
	full, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd))
	if err != nil {
		return "", err
	}
	inside, ok := strings.CutPrefix(full, r.path)
	if !ok || (inside != "" && !strings.HasPrefix(inside, "/")) {
		return "", fmt.Errorf("%s leads to %s, outside the sandbox's root", p, full)
	}
	if inside == "" {
		inside = "/"
	}
	return inside, nil
}

// at runs fn with a path that names p inside the root (a magic link of
// /proc/self/fd), for calls like mount(2) that take a path.
func (r *root) at(p string, fn func(path string) error) error {
	fd, err := r.open(p)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return fn(fmt.Sprintf("/proc/self/fd/%d", fd))
}

// mkdirAll makes p and its parents inside the root (mode for new ones).
func (r *root) mkdirAll(p string, mode uint32) error {
	if p = rel(p); p == "." {
		return nil
	}
	parts := strings.Split(p, "/")
	for i := range parts {
		dir := strings.Join(parts[:i], "/")
		if dir == "" {
			dir = "."
		}
		err := r.at(dir, func(parent string) error {
			return unix.Mkdirat(unix.AT_FDCWD, parent+"/"+parts[i], mode)
		})
		if err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("making %s in the sandbox: %w", "/"+strings.Join(parts[:i+1], "/"), err)
		}
	}
	return nil
}

// stat reads p inside the root without following a last symlink; ok is
// false when p does not exist.
func (r *root) stat(p string) (st unix.Stat_t, ok bool, err error) {
	fd, err := r.open(p)
	if errors.Is(err, unix.ENOENT) {
		return st, false, nil
	}
	if err != nil {
		return st, false, err
	}
	defer unix.Close(fd)
	if err := unix.Fstat(fd, &st); err != nil {
		return st, false, err
	}
	return st, true, nil
}

// mount mounts source of fstype on p inside the root.
func (r *root) mount(source, p, fstype string, flags uintptr, data string) error {
	err := r.at(p, func(target string) error { return unix.Mount(source, target, fstype, flags, data) })
	if err != nil {
		return fmt.Errorf("mounting %s on %s in the sandbox: %w", fstype, p, err)
	}
	return nil
}

// bind binds host path source on p inside the root, read-only if ro.
func (r *root) bind(source, p string, ro bool) error {
	err := r.at(p, func(target string) error { return unix.Mount(source, target, "", unix.MS_BIND|unix.MS_REC, "") })
	if err == nil && ro {
		// Resolved again: a descriptor opened before the bind names the
		// mount below it.
		err = r.at(p, func(target string) error { return remount(target, unix.MS_RDONLY) })
	}
	if err != nil {
		return fmt.Errorf("binding %s on %s in the sandbox: %w", source, p, err)
	}
	return nil
}

// bindInside binds p inside the root onto q inside the root.
func (r *root) bindInside(p, q string, ro bool) error {
	return r.at(p, func(source string) error { return r.bind(source, q, ro) })
}

// remount sets flags (MS_RDONLY, MS_NOATIME) on the bind mount at
// target, keeping the flags the kernel insists a remount repeats (nosuid,
// nodev, noexec of a mount it came from).
func remount(target string, flags uintptr) error {
	var st unix.Statfs_t
	if err := unix.Statfs(target, &st); err != nil {
		return err
	}
	var keep uintptr
	for _, f := range []struct{ st, ms uintptr }{
		{unix.ST_NOSUID, unix.MS_NOSUID}, {unix.ST_NODEV, unix.MS_NODEV}, {unix.ST_NOEXEC, unix.MS_NOEXEC},
		{unix.ST_NOATIME, unix.MS_NOATIME}, {unix.ST_NODIRATIME, unix.MS_NODIRATIME}, {unix.ST_RELATIME, unix.MS_RELATIME},
	} {
		if uintptr(st.Flags)&f.st != 0 {
			keep |= f.ms
		}
	}
	if flags&unix.MS_NOATIME != 0 {
		keep &^= unix.MS_RELATIME
	}
	return unix.Mount("", target, "", unix.MS_BIND|unix.MS_REMOUNT|flags|keep, "")
}
