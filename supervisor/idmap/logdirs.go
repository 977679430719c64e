package idmap

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sandboxd/sandboxd/runtime/nsinit"
)

// A booted sandbox's /var/log is hidden and empty, and its services
// expect their directories there (nginx's, owned and moded as its
// package made it). It gets those a package installed, as dpkg's lists
// name them, and no other: the sandbox reads the same lists in its own
// root (the host's packages), so it learns nothing new, where a copy of
// the host's /var/log told it the name, owner and mode of every
// directory the host's admins and services had made there. A service
// that names its LogsDirectory= gets it from the sandbox's systemd.

// dpkgLists is where dpkg keeps each package's list of paths.
const dpkgLists = "/var/lib/dpkg/info"

// maxPackagedLogDirs bounds what the lists may name.
const maxPackagedLogDirs = 1024

// packagedLogDirs caches what the lists name under /var/log, read again
// when their directory changes (a package installed or removed).
var packagedLogDirs struct {
	mu    sync.Mutex
	dir   string
	mtime time.Time
	paths map[string]bool
}

// packagedUnder is the set of paths under dir ("/var/log") that dpkg's
// lists in lists name: empty on a host without dpkg.
func packagedUnder(lists, dir string) map[string]bool {
	st, err := os.Stat(lists)
	if err != nil {
		return nil
	}
	c := &packagedLogDirs
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.paths != nil && c.dir == lists+"\x00"+dir && st.ModTime().Equal(c.mtime) {
		return c.paths
	}
	names, _ := filepath.Glob(filepath.Join(lists, "*.list"))
	paths := map[string]bool{}
	for _, name := range names {
		f, err := os.Open(name)
		if err != nil {
			continue
		}
		lines := bufio.NewScanner(f)
		for lines.Scan() && len(paths) < maxPackagedLogDirs {
			if p := lines.Text(); strings.HasPrefix(p, dir+"/") && filepath.Clean(p) == p {
				paths[p] = true
			}
		}
		f.Close()
	}
	c.dir, c.mtime, c.paths = lists+"\x00"+dir, st.ModTime(), paths
	return paths
}

// LogDirs are the directories of the host's /var/log that a package
// installed, for a booted sandbox of namespace ns (logDirs).
func LogDirs(ns *nsinit.IDMap) []nsinit.Dir {
	return logDirs("/var/log", packagedUnder(dpkgLists, "/var/log"), ns)
}

// maxLogDirs bounds how many of the host's /var/log directories a
// booted sandbox gets (depth 3 at most).
const maxLogDirs = 256

// logDirs are the directories under dir (the host's /var/log) that a
// package installed (packaged), with their owners and modes,
// for a booted sandbox's hidden, empty /var/log: services expect theirs.
// Others are not named to the sandbox. An owner the sandbox's namespace
// (ns) lacks is nobody there.
func logDirs(dir string, packaged map[string]bool, ns *nsinit.IDMap) []nsinit.Dir {
	var out []nsinit.Dir
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return nil
		}
		if !d.IsDir() {
			return nil
		}
		if !packaged[p] {
			return filepath.SkipDir // nor what is below: made by no package either
		}
		if strings.Count(strings.TrimPrefix(p, dir), "/") > 3 || len(out) >= maxLogDirs {
			return filepath.SkipDir
		}
		var st syscall.Stat_t
		if syscall.Lstat(p, &st) != nil {
			return filepath.SkipDir
		}
		out = append(out, hostDir(p, &st, ns))
		return nil
	})
	return out
}
