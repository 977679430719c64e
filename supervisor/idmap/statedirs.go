package idmap

import (
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sandboxd/sandboxd/runtime/nsinit"
	"github.com/sandboxd/sandboxd/supervisor/state"
)

// stateRoots are where services keep state that the host's packages
// made: where a booted sandbox's services find their directories.
var stateRoots = []string{"/var/lib", "/var/cache", "/var/spool"}

// Bounds of stateDirs: the directories it gives (depth 4 at most), their
// paths' bytes together (they travel in the init's spec, one datagram:
// a host account that made many long names must not stop every
// sandbox's start), and the entries it visits.
const (
	maxStateDirs      = 512
	maxStateDirsBytes = 16 << 10
	maxStateVisits    = 50000
)

// stateDirs are the host's directories under roots that a sandbox whose
// host files are shown through shown cannot read (a service account's
// 0700 state: /var/lib/nginx/body, /var/lib/polkit-1), each after its
// parents, for makeStateDirs: the overlay must read a directory's
// extended attributes to look into it, and fails with EACCES on those
// (a service's start that makes its directory then fails). Their content
// is not the sandbox's to see; empty, they are as a fresh install has
// them.
//
// Owners the sandbox's namespace (ns) lacks are nobody's there.
func stateDirs(roots []string, shown, ns *nsinit.IDMap) []nsinit.Dir {
	var out []nsinit.Dir
	have := map[string]bool{}
	size, visits := 0, 0
	attrs := func(p string, st *syscall.Stat_t, opaque bool) nsinit.Dir {
		d := hostDir(p, st, ns)
		d.Opaque = opaque
		return d
	}
	for _, root := range roots {
		_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if visits++; visits > maxStateVisits {
				return filepath.SkipAll
			}
			if err != nil || len(out) >= maxStateDirs || size > maxStateDirsBytes {
				return filepath.SkipDir
			}
			if !d.IsDir() {
				return nil
			}
			var st syscall.Stat_t
			if syscall.Lstat(p, &st) != nil {
				return filepath.SkipDir
			}
			readable := shown.HasUID(st.Uid) && shown.HasGID(st.Gid) || st.Mode&0o005 == 0o005
			if readable {
				if strings.Count(strings.TrimPrefix(p, root), "/") >= 4 {
					return filepath.SkipDir
				}
				return nil
			}
			// Its parents first, as the host has them.
			var parents []string
			for q := filepath.Dir(p); q != "/" && !have[q]; q = filepath.Dir(q) {
				parents = append(parents, q)
			}
			for _, q := range slices.Backward(parents) {
				var pst syscall.Stat_t
				if syscall.Lstat(q, &pst) != nil {
					return filepath.SkipAll
				}
				have[q] = true
				out = append(out, attrs(q, &pst, false))
				size += len(q)
			}
			out = append(out, attrs(p, &st, true))
			size += len(p)
			return filepath.SkipDir
		})
	}
	return out
}

// stateDirsTTL is how long a walk of the state roots serves the creates
// of one owner: a create must stay a few milliseconds, and a service that
// made its directory since is seen by the next walk.
const stateDirsTTL = 10 * time.Second

// StateDirCache keeps the last walk per owner (the directories a sandbox
// may read depend on its owner's ids). Its zero value is ready.
type StateDirCache struct {
	mu sync.Mutex
	by map[uint32]stateDirWalk
}

type stateDirWalk struct {
	at   time.Time
	dirs []nsinit.Dir
}

// Of are sandbox rec's state directories (none without a user
// namespace), from a walk at most stateDirsTTL old; a booted sandbox's,
// whose services start at once, from a walk now.
func (c *StateDirCache) Of(rec state.Record) []nsinit.Dir {
	if rec.IDs == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if w, ok := c.by[rec.Owner]; ok && time.Since(w.at) < stateDirsTTL && !rec.Boot {
		return w.dirs
	}
	dirs := stateDirs(stateRoots, Shown(rec), ForInit(rec.IDs))
	if c.by == nil {
		c.by = map[uint32]stateDirWalk{}
	}
	c.by[rec.Owner] = stateDirWalk{at: time.Now(), dirs: dirs}
	return dirs
}

// hostDir is the host's directory p (st) as a sandbox of namespace ns
// gets it made: its mode, and its owners where ns has them (nobody's
// elsewhere).
func hostDir(p string, st *syscall.Stat_t, ns *nsinit.IDMap) nsinit.Dir {
	d := nsinit.Dir{Path: p, Mode: st.Mode & 0o7777, UID: st.Uid, GID: st.Gid}
	if !ns.HasUID(d.UID) {
		d.UID = nobodyID
	}
	if !ns.HasGID(d.GID) {
		d.GID = nobodyID
	}
	return d
}
