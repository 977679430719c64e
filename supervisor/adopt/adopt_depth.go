package adopt

// How deep a tree the copy of an owned adoption goes (adopt_copy.go),
// checked again before a release empties the directory it fills; and
// how much room its copy takes, measured by descriptor as it is copied.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/crashpoint"
	"github.com/sandboxd/sandboxd/supervisor"
	"github.com/sandboxd/sandboxd/supervisor/state"
)

// maxCopyDepth bounds how deep a copied tree goes. The copy holds two
// descriptors for each directory it is in (the source's and the copy's,
// the owner's changes kept out by them), and its owner may move a chain
// of directories of any depth (made by relative names, which no path
// bounds) into the tree once it was measured: unbounded, one copy would
// take every descriptor the daemon may have (LimitNOFILE, 32768) and
// every other call of every user would fail meanwhile. No path of
// PATH_MAX names even a quarter of this depth's second half: no real
// project is refused by it.
const maxCopyDepth = 512

// tooDeep says that top holds rel, a directory more than maxCopyDepth
// below it.
func tooDeep(top, rel string) error {
	return fmt.Errorf("%s holds directories more than %d deep (%s…): a tree that deep is not copied (move it out first): %w",
		top, maxCopyDepth, strings.ToValidUTF8(rel[:min(len(rel), 120)], "?"), supervisor.ErrInvalidProject)
}

// withinDepth refuses the tree of directory dir (named top) if it holds
// directories more than maxCopyDepth deep, before anything is done that
// a copy refused half way would leave half done (a release empties the
// directory it fills). It reads names and kinds only, holding two
// descriptors a level as the copy does.
func withinDepth(ctx context.Context, dir int, top string) error {
	return walkDepth(ctx, dir, top, "", 0)
}

func walkDepth(ctx context.Context, dir int, top, rel string, depth int) error {
	rd, err := unix.Openat(dir, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("reading %s/%s: %w", top, rel, err)
	}
	f := os.NewFile(uintptr(rd), top)
	defer f.Close()
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		entries, err := f.ReadDir(1024)
		for _, e := range entries {
			if !e.IsDir() {
				continue
			}
			r := e.Name()
			if rel != "" {
				r = rel + "/" + r
			}
			if depth >= maxCopyDepth {
				return tooDeep(top, r)
			}
			sub, err := unix.Openat(dir, e.Name(), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				return fmt.Errorf("reading %s/%s: %w", top, r, err)
			}
			err = walkDepth(ctx, sub, top, r, depth+1)
			unix.Close(sub)
			if err != nil {
				return err
			}
		}
		if errors.Is(err, io.EOF) || err == nil && len(entries) == 0 {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading %s/%s: %w", top, rel, err)
		}
	}
}

// copyableBack refuses the release of owned adoption rec while a tree
// of its volume is too deep to be copied back (withinDepth): said while
// the project is still mounted, where its owner can move it out.
func copyableBack(ctx context.Context, rec state.Project) error {
	for _, p := range rec.Adoption.Paths() {
		fd, _, err := openPath(rec.Adoption.InVolume(rec.Location, p), unix.O_RDONLY)
		if err != nil {
			return fmt.Errorf("opening the volume of %s: %w", p, err)
		}
		err = withinDepth(ctx, fd, p)
		unix.Close(fd)
		if err != nil {
			return err
		}
	}
	return nil
}

// roomForOwned checks that the filesystem of to has room for what the
// owned directory path holds, measured beneath a descriptor openOwned
// gives (as caller, nil for root and admins): its owner may swap any
// directory in it for a symlink meanwhile, and a walk by name would
// follow it as root, into a root-only directory, and count its size.
func roomForOwned(ctx context.Context, path string, caller *uint32, to string) error {
	fd, _, err := openOwned(path, caller)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("measuring %s: %w", path, err)
	}
	m := measure{top: path, dev: st.Dev, need: st.Blocks * 512}
	if err := m.dir(ctx, fd, "", 0); err != nil {
		return fmt.Errorf("measuring %s: %w", path, err)
	}
	return roomLeft(path, m.need, to)
}

// measure sums the blocks of a tree on one filesystem, by descriptor.
type measure struct {
	top  string
	dev  uint64
	need int64
}

// dir adds what directory fd (rel below the top, depth deep) holds.
// An entry gone or changed meanwhile is left out: the copy reads each
// again, and refuses what changed kind.
func (m *measure) dir(ctx context.Context, fd int, rel string, depth int) error {
	rd, err := unix.Openat(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(rd), m.top)
	defer f.Close()
	for first := true; ; first = false {
		if err := ctx.Err(); err != nil {
			return err
		}
		names, err := f.Readdirnames(1024)
		if first && rel == "" {
			crashpoint.Hit(crashpoint.AdoptMeasuring)
		}
		for _, n := range names {
			var st unix.Stat_t
			if unix.Fstatat(fd, n, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
				continue
			}
			m.need += st.Blocks * 512
			if st.Mode&unix.S_IFMT != unix.S_IFDIR || st.Dev != m.dev {
				continue
			}
			r := n
			if rel != "" {
				r = rel + "/" + n
			}
			if depth >= maxCopyDepth {
				return tooDeep(m.top, r)
			}
			sub, err := unix.Openat(fd, n, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				continue // swapped for a symlink, or gone
			}
			err = m.dir(ctx, sub, r, depth+1)
			unix.Close(sub)
			if err != nil {
				return err
			}
		}
		if errors.Is(err, io.EOF) || err == nil && len(names) == 0 {
			return nil
		}
		if err != nil {
			return err
		}
	}
}
