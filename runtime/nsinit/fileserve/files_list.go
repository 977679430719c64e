package fileserve

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/fsat"
)

// MaxListAnswer bounds a list's JSON: MaxListed entries of names and
// link targets of a few hundred bytes each.
const MaxListAnswer = 8 << 20

// listFiles lists p for the caller: a directory's entries (recursive: all
// below it), or the entry of what p names, a symlink not followed. The
// walk goes by descriptor: each directory is opened from its parent's
// descriptor without following a symlink, so a directory swapped for a
// link while the walk runs is not entered, and none of the kernel's
// filesystems (/proc, whose self would be the init) is listed or entered.
func listFiles(p string, req *Request, pipe *os.File) (Result, error) {
	max := req.MaxEntries
	if max <= 0 || max > MaxListed {
		max = MaxListed
	}
	fd, err := unix.Openat2(unix.AT_FDCWD, p, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return Result{}, fmt.Errorf("opening %s: %w", p, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return Result{}, fmt.Errorf("reading %s: %w", p, err)
	}
	var entries []Entry
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		e := entry(path.Base(p), &st)
		if e.Kind == "symlink" {
			e.Target = readlinkAt(fd, "")
		}
		entries = []Entry{e}
	} else {
		if kernelFS(fd) {
			return Result{}, fmt.Errorf("%s: %w", p, errKernelFile)
		}
		dir, err := unix.Openat(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return Result{}, fmt.Errorf("listing %s: %w", p, err)
		}
		entries = []Entry{}
		if err := listDir(dir, p, "", req.Recursive, max, &entries); err != nil {
			return Result{}, err
		}
	}
	b, err := json.Marshal(entries)
	if err != nil {
		return Result{}, err
	}
	if len(b) > MaxListAnswer {
		return Result{}, fmt.Errorf("listing %s: the list is over %d bytes; list a directory below it", p, MaxListAnswer)
	}
	if _, err := pipe.Write(b); err != nil {
		return Result{}, fmt.Errorf("sending the list: %w", err)
	}
	return Result{Bytes: uint64(len(entries))}, nil
}

// listDir adds the entries of dir (a descriptor it closes; top names it
// in errors) as paths from rel, and, recursive, those below each
// directory it may open; one it may not, or one of the kernel's, is
// listed and not entered.
func listDir(dir int, top, rel string, recursive bool, max int, out *[]Entry) error {
	f := os.NewFile(uintptr(dir), top)
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return fmt.Errorf("listing %s: %w", path.Join(top, rel), err)
	}
	for _, name := range names {
		if len(*out) >= max {
			return fmt.Errorf("listing %s: more than %d entries; list a directory below it", top, max)
		}
		var st unix.Stat_t
		if err := unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			continue // gone meanwhile
		}
		e := entry(path.Join(rel, name), &st)
		if e.Kind == "symlink" {
			e.Target = readlinkAt(dir, name)
		}
		*out = append(*out, e)
		if !recursive || e.Kind != "dir" {
			continue
		}
		sub, err := unix.Openat(dir, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.EACCES) || errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ENOENT) {
			continue // not the caller's to enter, or swapped meanwhile
		}
		if err != nil {
			return fmt.Errorf("listing %s: %w", path.Join(top, e.Path), err)
		}
		if kernelFS(sub) {
			unix.Close(sub)
			continue
		}
		if err := listDir(sub, top, e.Path, true, max, out); err != nil {
			return err
		}
	}
	return nil
}

// entry is the entry of a file of st, called name.
func entry(name string, st *unix.Stat_t) Entry {
	return Entry{Path: name, Kind: kindOf(st.Mode), Mode: st.Mode & 0o7777, UID: st.Uid, Size: uint64(st.Size),
		Modified: uint64(st.Mtim.Sec)*1e6 + uint64(st.Mtim.Nsec)/1e3}
}

// readlinkAt reads the symlink name of dir ("": dir itself, an O_PATH
// descriptor of the link); "" if it cannot.
func readlinkAt(dir int, name string) string {
	target, err := fsat.Readlink(dir, name)
	if err != nil {
		return ""
	}
	return target
}
