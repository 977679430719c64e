package caches

import (
	"context"
	"errors"
	"fmt"
	"github.com/sandboxd/sandboxd/internal/fsat"
	"log/slog"
	"os/user"
	"slices"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/runtime/nsinit"
	"github.com/sandboxd/sandboxd/supervisor"
	"github.com/sandboxd/sandboxd/supervisor/audit"
	"github.com/sandboxd/sandboxd/supervisor/state"
	"github.com/sandboxd/sandboxd/supervisor/volname"
)

// cacheEnv sends the tools' caches into the owner's cache volume.
var cacheEnv = []string{
	"PIP_CACHE_DIR=" + nsinit.CachePath + "/pip",
	"npm_config_cache=" + nsinit.CachePath + "/npm",
	"GOMODCACHE=" + nsinit.CachePath + "/go/mod",
	"GOCACHE=" + nsinit.CachePath + "/go/build",
	"CARGO_HOME=" + nsinit.CachePath + "/cargo",
}

// cacheName is owner's cache volume.
func cacheName(owner uint32) string {
	return volname.PrefixCache + strconv.FormatUint(uint64(owner), 10)
}

// Config is what the daemon's configuration says of the caches.
type Config struct {
	// Enabled: each owner's sandboxes share a cache volume; without it
	// they have none, and Clear refuses.
	Enabled bool
	// Quota bounds an owner's cache, what all of the owner's sandboxes
	// put there together, in bytes (0: no bound).
	Quota uint64
}

// Caches are the owners' cache volumes. Their lock serializes the
// making, mounting and clearing of each: a start holds its owner's lock
// shared from the volume's making to its mount, Clear holds it alone,
// so that a volume is never deleted between the two.
type Caches struct {
	h   supervisor.Host
	cfg Config
	log *slog.Logger
	// mountedIn says whether the init whose pid it is has the cache
	// mounted (nsinit.CacheMounted; a test's own).
	mountedIn func(pid int) (bool, error)

	mu     sync.Mutex
	owners map[uint32]*cacheLock
	// quotaSet: owners whose volume's quota was set (to the
	// configuration's) since the daemon started.
	quotaSet map[uint32]bool
	// warned: problems logged once (by owner and kind).
	warned map[string]bool
	// mount: cache filesystems are made and mounted one at a time
	// (image.go): an image mounted twice would be corrupted.
	mount sync.Mutex
	// mounted: the sandboxes whose init has the cache mounted, whose
	// commands get the variables that send the tools there (cacheEnv).
	mounted map[string]bool
}

// New makes the caches' room over h, and joins its hooks: a sandbox
// (unless made with NoCache) has its owner's cache made before its init
// is launched and its path in the init's spec, the owner's lock held
// shared until the init built its world; its commands get cacheEnv
// while its init has the cache mounted.
func New(h supervisor.Host, cfg Config) *Caches {
	c := &Caches{h: h, cfg: cfg, log: h.Log(), mountedIn: nsinit.CacheMounted}
	hk := h.Hooks()
	hk.BeforeLaunch.Add(func(ctx context.Context, rec state.Record) {
		if !rec.NoCache {
			c.prepare(ctx, rec.Owner)
		}
	})
	hk.Spec.Add(func(ctx context.Context, rec state.Record, spec *nsinit.Spec) func() {
		if rec.NoCache {
			return func() {}
		}
		path, unlock := c.use(ctx, rec.Owner)
		spec.Cache = path
		return unlock
	})
	hk.Idmapped.Add(func(rec state.Record, m *nsinit.Mounts) {
		if m.CacheErr != nil {
			c.withoutCache(rec.Owner, "idmap", m.CacheErr)
		}
	})
	hk.Started.Add(func(_ context.Context, st supervisor.Started) {
		c.setMounted(st.Record.ID, c.cacheMounted(st.Record.ID, st.PID))
	})
	hk.Stopped.Add(func(id string) { c.setMounted(id, false) })
	hk.CommandEnv.Add(func(rec state.Record) []string {
		if c.isMounted(rec.ID) {
			return cacheEnv
		}
		return nil
	})
	return c
}

func (c *Caches) setMounted(id string, yes bool) {
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

func (c *Caches) isMounted(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mounted[id]
}

type cacheLock struct {
	sync.RWMutex
	users int // holders and waiters
}

// lock takes owner's lock, shared or alone; the function returned lets it go.
func (c *Caches) lock(owner uint32, shared bool) func() {
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
func (c *Caches) once(key string) bool {
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
func (c *Caches) withoutCache(owner uint32, kind string, err error) {
	if c.once(fmt.Sprintf("%d/%s", owner, kind)) {
		c.log.Warn("sandboxes are made without their owner's cache", "CALLER_UID", owner, "error", err.Error())
	}
}

// use takes owner's cache lock shared until the function returned
// is called, and returns the host path of its cache volume, made if
// need be ("": none, logged).
func (c *Caches) use(ctx context.Context, owner uint32) (string, func()) {
	if !c.cfg.Enabled {
		return "", func() {}
	}
	unlock := c.lock(owner, true)
	if c.onImage() {
		path, err := c.imageCache(ctx, owner)
		if err != nil {
			c.withoutCache(owner, "filesystem", err)
			return "", unlock
		}
		return path, unlock
	}
	v, err := c.ownerCache(ctx, owner)
	if err != nil {
		c.withoutCache(owner, "volume", err)
		return "", unlock
	}
	return v.Path, unlock
}

// prepare makes owner's cache volume before a sandbox's init is
// launched: on ZFS, a dataset mounted after the init's mount namespace
// was copied would not show in it.
func (c *Caches) prepare(ctx context.Context, owner uint32) {
	_, unlock := c.use(ctx, owner)
	unlock()
}

// ownerCache is owner's cache volume, made (with its quota, its root
// the owner's, mode 0700) if it does not exist. Call it with the owner's
// lock held.
func (c *Caches) ownerCache(ctx context.Context, owner uint32) (cowfs.Volume, error) {
	v, err := c.h.Backend().Get(ctx, cacheName(owner))
	if errors.Is(err, cowfs.ErrNotFound) {
		return c.makeCache(ctx, owner)
	}
	if err != nil {
		return v, fmt.Errorf("opening the cache volume of uid %d: %w", owner, err)
	}
	// A root inside may have given the root away or opened it up.
	if err := ownCacheRoot(v.Path, owner); err != nil {
		return v, err
	}
	c.mu.Lock()
	set := c.quotaSet[owner]
	c.mu.Unlock()
	if !set {
		if err := c.setQuota(ctx, v, owner); err != nil {
			return v, err
		}
	}
	return v, nil
}

// makeCache makes owner's cache volume. A volume whose quota or owner
// cannot be set is deleted again.
func (c *Caches) makeCache(ctx context.Context, owner uint32) (v cowfs.Volume, err error) {
	caps := c.h.Backend().Info().Capabilities
	if c.cfg.Quota > 0 && !caps.Quota {
		return v, fmt.Errorf("making the cache volume of uid %d: the pool cannot hold it to limits.cache_quota: %w", owner, cowfs.ErrUnsupported)
	}
	v, err = c.h.Backend().Create(ctx, cacheName(owner))
	if err != nil {
		return v, fmt.Errorf("making the cache volume of uid %d: %w", owner, err)
	}
	defer func() {
		if err != nil {
			if derr := c.h.Backend().Delete(context.WithoutCancel(ctx), v); derr != nil {
				c.log.Error("deleting a cache volume made in part", "volume", v.Name, "error", derr)
			}
		}
	}()
	if err := ownCacheRoot(v.Path, owner); err != nil {
		return v, err
	}
	if err := c.setQuota(ctx, v, owner); err != nil {
		return v, err
	}
	c.log.Info("made a cache volume", "CALLER_UID", owner, "volume", v.Name, "quota", c.cfg.Quota)
	return v, nil
}

// cacheQuota sets the configured quota on owner's cache volume v, once
// a daemon start: a quota taken out of the configuration is lifted, and
// a pool that never counted quotas is not made to for none.
func (c *Caches) setQuota(ctx context.Context, v cowfs.Volume, owner uint32) error {
	lift := false
	if c.cfg.Quota == 0 {
		u, err := c.h.Backend().Usage(ctx, v)
		lift = err == nil && u.Quota > 0
	}
	if c.cfg.Quota > 0 || lift {
		if err := c.h.Backend().SetQuota(ctx, v, c.cfg.Quota); err != nil {
			return fmt.Errorf("setting the quota of the cache volume of uid %d: %w", owner, err)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.quotaSet == nil {
		c.quotaSet = map[uint32]bool{}
	}
	c.quotaSet[owner] = true
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
func (c *Caches) cacheMounted(id string, pid int) bool {
	ok, err := c.mountedIn(pid)
	if err != nil {
		c.log.Warn("the sandbox's commands get no cache variables", "SANDBOX_ID", id, "error", err)
	}
	return ok
}

// Clear empties owner's cache volume. With no sandbox of the owner's
// (none recorded, in any state), the volume is deleted and made anew;
// otherwise, as one of them may have it mounted, its contents are
// removed in place, without following any symlink a sandbox planted
// there. An owner without a cache has nothing to clear.
func (c *Caches) Clear(ctx context.Context, owner uint32) (err error) {
	defer func() { c.h.AuditEntry(ctx, audit.Entry{Action: "clear-cache"}, state.Record{}, err) }()
	if !c.cfg.Enabled {
		return fmt.Errorf("clearing the cache of uid %d: sandboxes have no caches here: %w", owner, cowfs.ErrUnsupported)
	}
	defer c.lock(owner, false)()
	if c.onImage() {
		return c.clearImageCache(ctx, owner)
	}
	v, found, inUse, err := c.cacheToClear(ctx, owner, cacheName(owner))
	if err != nil || !found {
		return err
	}
	if !inUse {
		derr := c.h.Backend().Delete(ctx, v)
		if derr == nil {
			if _, err := c.makeCache(ctx, owner); err != nil {
				// The next sandbox makes it.
				c.log.Warn("making a cleared cache volume again", "CALLER_UID", owner, "error", err)
			}
			c.log.Info("cleared a cache volume", "CALLER_UID", owner, "volume", v.Name, "how", "deleted")
			return nil
		}
		// Held by something no record tells of: empty it in place.
		c.log.Warn("deleting a cache volume to clear it; emptying it instead", "CALLER_UID", owner, "error", derr)
	}
	if err := emptyCache(ctx, v.Path, owner); err != nil {
		return err
	}
	c.log.Info("cleared a cache volume", "CALLER_UID", owner, "volume", v.Name, "how", "emptied")
	return nil
}

// cacheToClear is, for Clear, owner's cache volume called name (not
// found: none to clear) and whether any sandbox of the owner's is
// recorded, in any state (in use: it may have the cache mounted).
func (c *Caches) cacheToClear(ctx context.Context, owner uint32, name string) (v cowfs.Volume, found, inUse bool, err error) {
	v, err = c.h.Backend().Get(ctx, name)
	if errors.Is(err, cowfs.ErrNotFound) {
		return v, false, false, nil
	}
	if err != nil {
		return v, false, false, fmt.Errorf("clearing the cache of uid %d: %w", owner, err)
	}
	recs, err := c.h.Store().List()
	if err != nil {
		return v, false, false, fmt.Errorf("clearing the cache of uid %d: %w", owner, err)
	}
	return v, true, slices.ContainsFunc(recs, func(r state.Record) bool { return r.Owner == owner }), nil
}

// emptyCache empties, in place, the cache whose root is dir and gives
// that root back to owner.
func emptyCache(ctx context.Context, dir string, owner uint32) error {
	if err := fsat.EmptyDir(ctx, dir, supervisor.ErrBusy); err != nil {
		return fmt.Errorf("clearing the cache of uid %d: %w", owner, err)
	}
	if err := ownCacheRoot(dir, owner); err != nil {
		return fmt.Errorf("clearing the cache of uid %d: %w", owner, err)
	}
	return nil
}
