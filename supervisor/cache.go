package supervisor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"slices"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/runtime/nsinit"
	"github.com/sandboxd/sandboxd/supervisor/audit"
	"github.com/sandboxd/sandboxd/supervisor/state"
)

// Caches kept across sandboxes: each owner has one volume, cache-u<uid>,
// made on first need, that every sandbox of that owner (and no one
// else's) sees read-write at nsinit.CachePath, where the variables of
// cacheEnv send pip, npm, Go and cargo. Its quota (Config.CacheQuota)
// bounds what all of the owner's sandboxes put there together. It is not
// under the project: checkpoints, diffs and promotions never see it, and
// a destroy keeps it. A cache is a convenience: a sandbox whose cache
// cannot be had is made without one. Where a copy into a volume escapes
// its quota (btrfs reflinks), a cache with a quota is a filesystem of its
// own instead (cache_image.go).

// cacheEnv sends the tools' caches into the owner's cache volume.
var cacheEnv = []string{
	"PIP_CACHE_DIR=" + nsinit.CachePath + "/pip",
	"npm_config_cache=" + nsinit.CachePath + "/npm",
	"GOMODCACHE=" + nsinit.CachePath + "/go/mod",
	"GOCACHE=" + nsinit.CachePath + "/go/build",
	"CARGO_HOME=" + nsinit.CachePath + "/cargo",
}

// cacheName is owner's cache volume.
func cacheName(owner uint32) string { return prefixCache + strconv.FormatUint(uint64(owner), 10) }

// caches serializes the making, mounting and clearing of owners' cache
// volumes: a start holds its owner's lock shared from the volume's
// making to its mount, ClearCache holds it alone, so that a volume is
// never deleted between the two.
type caches struct {
	mu     sync.Mutex
	owners map[uint32]*cacheLock
	// quotaSet: owners whose volume's quota was set (to the
	// configuration's) since the daemon started.
	quotaSet map[uint32]bool
	// warned: problems logged once (by owner and kind).
	warned map[string]bool
	// mount: cache filesystems are made and mounted one at a time
	// (cache_image.go): an image mounted twice would be corrupted.
	mount sync.Mutex
	// mounted: the sandboxes whose init has the cache mounted, whose
	// commands get the variables that send the tools there (cacheEnv).
	mounted map[string]bool
}

func (c *caches) setMounted(id string, yes bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !yes {
		delete(c.mounted, id)
		return
	}
	if c.mounted == nil {
		c.mounted = map[string]bool{}
	}
	c.mounted[id] = true
}

func (c *caches) isMounted(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mounted[id]
}

type cacheLock struct {
	sync.RWMutex
	users int // holders and waiters
}

// lock takes owner's lock, shared or alone; the function returned lets it go.
func (c *caches) lock(owner uint32, shared bool) func() {
	c.mu.Lock()
	if c.owners == nil {
		c.owners = map[uint32]*cacheLock{}
	}
	l := c.owners[owner]
	if l == nil {
		l = &cacheLock{}
		c.owners[owner] = l
	}
	l.users++
	c.mu.Unlock()
	if shared {
		l.RLock()
	} else {
		l.Lock()
	}
	return func() {
		if shared {
			l.RUnlock()
		} else {
			l.Unlock()
		}
		c.mu.Lock()
		if l.users--; l.users == 0 {
			delete(c.owners, owner)
		}
		c.mu.Unlock()
	}
}

// once reports whether key is new (and notes it).
func (c *caches) once(key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.warned == nil {
		c.warned = map[string]bool{}
	}
	if c.warned[key] {
		return false
	}
	c.warned[key] = true
	return true
}

// withoutCache logs, once per owner and reason, that owner's sandboxes
// are made without a cache.
func (s *Supervisor) withoutCache(owner uint32, kind string, err error) {
	if s.caches.once(fmt.Sprintf("%d/%s", owner, kind)) {
		s.log.Warn("sandboxes are made without their owner's cache", "CALLER_UID", owner, "error", err.Error())
	}
}

// useCache takes owner's cache lock shared until the function returned
// is called, and returns the host path of its cache volume, made if
// need be ("": none, logged).
func (s *Supervisor) useCache(ctx context.Context, owner uint32) (string, func()) {
	if !s.cfg.Caches {
		return "", func() {}
	}
	unlock := s.caches.lock(owner, true)
	if s.cacheOnImage() {
		path, err := s.imageCache(ctx, owner)
		if err != nil {
			s.withoutCache(owner, "filesystem", err)
			return "", unlock
		}
		return path, unlock
	}
	v, err := s.ownerCache(ctx, owner)
	if err != nil {
		s.withoutCache(owner, "volume", err)
		return "", unlock
	}
	return v.Path, unlock
}

// prepareCache makes owner's cache volume before a sandbox's init is
// launched: on ZFS, a dataset mounted after the init's mount namespace
// was copied would not show in it.
func (s *Supervisor) prepareCache(ctx context.Context, owner uint32) {
	_, unlock := s.useCache(ctx, owner)
	unlock()
}

// ownerCache is owner's cache volume, made (with its quota, its root
// the owner's, mode 0700) if it does not exist. Call it with the owner's
// lock held.
func (s *Supervisor) ownerCache(ctx context.Context, owner uint32) (cowfs.Volume, error) {
	v, err := s.cfg.Backend.Get(ctx, cacheName(owner))
	if errors.Is(err, cowfs.ErrNotFound) {
		return s.makeCache(ctx, owner)
	}
	if err != nil {
		return v, fmt.Errorf("opening the cache volume of uid %d: %w", owner, err)
	}
	// A root inside may have given the root away or opened it up.
	if err := ownCacheRoot(v.Path, owner); err != nil {
		return v, err
	}
	s.caches.mu.Lock()
	set := s.caches.quotaSet[owner]
	s.caches.mu.Unlock()
	if !set {
		if err := s.cacheQuota(ctx, v, owner); err != nil {
			return v, err
		}
	}
	return v, nil
}

// makeCache makes owner's cache volume. A volume whose quota or owner
// cannot be set is deleted again.
func (s *Supervisor) makeCache(ctx context.Context, owner uint32) (v cowfs.Volume, err error) {
	caps := s.cfg.Backend.Info().Capabilities
	if s.cfg.CacheQuota > 0 && !caps.Quota {
		return v, fmt.Errorf("making the cache volume of uid %d: the pool cannot hold it to limits.cache_quota: %w", owner, cowfs.ErrUnsupported)
	}
	v, err = s.cfg.Backend.Create(ctx, cacheName(owner))
	if err != nil {
		return v, fmt.Errorf("making the cache volume of uid %d: %w", owner, err)
	}
	defer func() {
		if err != nil {
			if derr := s.cfg.Backend.Delete(context.WithoutCancel(ctx), v); derr != nil {
				s.log.Error("deleting a cache volume made in part", "volume", v.Name, "error", derr)
			}
		}
	}()
	if err := ownCacheRoot(v.Path, owner); err != nil {
		return v, err
	}
	if err := s.cacheQuota(ctx, v, owner); err != nil {
		return v, err
	}
	s.log.Info("made a cache volume", "CALLER_UID", owner, "volume", v.Name, "quota", s.cfg.CacheQuota)
	return v, nil
}

// cacheQuota sets the configured quota on owner's cache volume v, once
// a daemon start: a quota taken out of the configuration is lifted, and
// a pool that never counted quotas is not made to for none.
func (s *Supervisor) cacheQuota(ctx context.Context, v cowfs.Volume, owner uint32) error {
	lift := false
	if s.cfg.CacheQuota == 0 {
		u, err := s.cfg.Backend.Usage(ctx, v)
		lift = err == nil && u.Quota > 0
	}
	if s.cfg.CacheQuota > 0 || lift {
		if err := s.cfg.Backend.SetQuota(ctx, v, s.cfg.CacheQuota); err != nil {
			return fmt.Errorf("setting the quota of the cache volume of uid %d: %w", owner, err)
		}
	}
	s.caches.mu.Lock()
	defer s.caches.mu.Unlock()
	if s.caches.quotaSet == nil {
		s.caches.quotaSet = map[uint32]bool{}
	}
	s.caches.quotaSet[owner] = true
	return nil
}

// ownCacheRoot makes the root of the cache volume at path the owner's
// (its uid and primary group), mode 0700, by a descriptor of it: a
// directory, never a symlink followed.
func ownCacheRoot(path string, owner uint32) error {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("opening the cache volume %s: %w", path, err)
	}
	defer unix.Close(fd)
	gid := primaryGID(owner)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("reading the cache volume %s: %w", path, err)
	}
	if st.Uid != owner || st.Gid != gid {
		if err := unix.Fchown(fd, int(owner), int(gid)); err != nil {
			return fmt.Errorf("giving the cache volume %s to uid %d: %w", path, owner, err)
		}
	}
	if st.Mode&0o7777 != 0o700 {
		if err := unix.Fchmod(fd, 0o700); err != nil {
			return fmt.Errorf("setting the mode of the cache volume %s: %w", path, err)
		}
	}
	return nil
}

// primaryGID is owner's primary group (its uid where the user database
// does not know it, as a command's gid is then).
func primaryGID(owner uint32) uint32 {
	if u, err := user.LookupId(strconv.FormatUint(uint64(owner), 10)); err == nil {
		if gid, err := strconv.ParseUint(u.Gid, 10, 32); err == nil {
			return uint32(gid)
		}
	}
	return owner
}

// cacheMounted reports whether sandbox id, whose init is pid, has its
// owner's cache mounted: its commands then get cacheEnv. (A cache that
// did not mount was logged where it failed: by the daemon, or by the
// init.)
func (s *Supervisor) cacheMounted(id string, pid int) bool {
	ok, err := nsinit.CacheMounted(pid)
	if err != nil {
		s.log.Warn("the sandbox's commands get no cache variables", "SANDBOX_ID", id, "error", err)
	}
	return ok
}

// ClearCache empties owner's cache volume. With no sandbox of the owner's
// (none recorded, in any state), the volume is deleted and made anew;
// otherwise, as one of them may have it mounted, its contents are
// removed in place, without following any symlink a sandbox planted
// there. An owner without a cache has nothing to clear.
func (s *Supervisor) ClearCache(ctx context.Context, owner uint32) (err error) {
	defer func() { s.auditEntry(ctx, audit.Entry{Action: "clear-cache"}, state.Record{}, err) }()
	if !s.cfg.Caches {
		return fmt.Errorf("clearing the cache of uid %d: sandboxes have no caches here: %w", owner, cowfs.ErrUnsupported)
	}
	defer s.caches.lock(owner, false)()
	if s.cacheOnImage() {
		return s.clearImageCache(ctx, owner)
	}
	v, found, inUse, err := s.cacheToClear(ctx, owner, cacheName(owner))
	if err != nil || !found {
		return err
	}
	if !inUse {
		derr := s.cfg.Backend.Delete(ctx, v)
		if derr == nil {
			if _, err := s.makeCache(ctx, owner); err != nil {
				// The next sandbox makes it.
				s.log.Warn("making a cleared cache volume again", "CALLER_UID", owner, "error", err)
			}
			s.log.Info("cleared a cache volume", "CALLER_UID", owner, "volume", v.Name, "how", "deleted")
			return nil
		}
		// Held by something no record tells of: empty it in place.
		s.log.Warn("deleting a cache volume to clear it; emptying it instead", "CALLER_UID", owner, "error", derr)
	}
	if err := emptyCache(ctx, v.Path, owner); err != nil {
		return err
	}
	s.log.Info("cleared a cache volume", "CALLER_UID", owner, "volume", v.Name, "how", "emptied")
	return nil
}

// cacheToClear is, for ClearCache, owner's cache volume called name (not
// found: none to clear) and whether any sandbox of the owner's is
// recorded, in any state (in use: it may have the cache mounted).
func (s *Supervisor) cacheToClear(ctx context.Context, owner uint32, name string) (v cowfs.Volume, found, inUse bool, err error) {
	v, err = s.cfg.Backend.Get(ctx, name)
	if errors.Is(err, cowfs.ErrNotFound) {
		return v, false, false, nil
	}
	if err != nil {
		return v, false, false, fmt.Errorf("clearing the cache of uid %d: %w", owner, err)
	}
	recs, err := s.cfg.Store.List()
	if err != nil {
		return v, false, false, fmt.Errorf("clearing the cache of uid %d: %w", owner, err)
	}
	return v, true, slices.ContainsFunc(recs, func(r state.Record) bool { return r.Owner == owner }), nil
}

// emptyCache empties, in place, the cache whose root is dir and gives
// that root back to owner.
func emptyCache(ctx context.Context, dir string, owner uint32) error {
	if err := emptyDir(ctx, dir); err != nil {
		return fmt.Errorf("clearing the cache of uid %d: %w", owner, err)
	}
	if err := ownCacheRoot(dir, owner); err != nil {
		return fmt.Errorf("clearing the cache of uid %d: %w", owner, err)
	}
	return nil
}

// emptyDir removes everything in the directory at path (a volume's root,
// in the pool, which no sandbox can replace) but the directory itself.
// Removal goes by descriptors under it (os.Root): a symlink there is
// removed, never followed, and nothing outside is reached, whatever a
// sandbox renames meanwhile. It reads a batch of names at a time, again
// from the start, until none is left (what a sandbox writes meanwhile
// goes too), for a bounded number of rounds: a sandbox that writes as
// fast as it is emptied does not hold the owner's cache lock for ever.
func emptyDir(ctx context.Context, path string) error {
	root, err := os.OpenRoot(path)
	if err != nil {
		return fmt.Errorf("opening %s: %w", path, err)
	}
	defer root.Close()
	for range 1024 {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("emptying %s: %w", path, err)
		}
		dir, err := root.Open(".")
		if err != nil {
			return fmt.Errorf("opening %s: %w", path, err)
		}
		names, err := dir.Readdirnames(1024)
		dir.Close()
		if errors.Is(err, io.EOF) || err == nil && len(names) == 0 {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading %s: %w", path, err)
		}
		var errs []error
		for _, name := range names {
			if err := root.RemoveAll(name); err != nil {
				errs = append(errs, fmt.Errorf("removing %s from %s: %w", name, path, err))
			}
		}
		if len(errs) > 0 {
			return errors.Join(errs...)
		}
	}
	return fmt.Errorf("emptying %s: it keeps filling (a sandbox writes there): %w", path, ErrBusy)
}
