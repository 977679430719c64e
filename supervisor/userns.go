package supervisor

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/runtime/nsinit"
	"github.com/sandboxd/sandboxd/supervisor/state"
)

// Sandboxes in user namespaces: root in their own sandbox, nobody on the
// host. Each holds a block of IDBlock host ids that no other live
// sandbox and no host user has; inside it, every id of the block exists
// at its own number (an owner's id above it at the block's top). Two id
// maps, two jobs: the sandbox's layer and its copy of the project are
// idmapped through the whole map, so every file of the copy shows its
// real owner (root's, www-data's, postgres's, another user's), root
// inside may change any of them and a service inside runs on its own
// files; the host root's layers are idmapped through a narrow one
// (shownIDs: root, nobody, the owner), so a system account's or another
// user's file there has no id inside, shows as nobody's, and the
// sandbox's root has no power over it. What the sandbox's root writes
// lands on disk as uid 0.

// Values of UserNS.Mode.
const (
	// UserNSAuto: sandboxes get user namespaces where the kernel, the
	// pool and the root layers allow; elsewhere they are made as without
	// (and root inside is only for root callers).
	UserNSAuto = "auto"
	// UserNSRequire: the daemon does not start where they cannot be had.
	UserNSRequire = "require"
	// UserNSOff: no user namespaces.
	UserNSOff = "off"
)

// IDBlock is how many host ids one sandbox holds: a block aligned to it.
const IDBlock = 1 << 16

// nobodyID is the overflow id, nobody and nogroup.
const nobodyID = 65534

// UserNS says whether and how sandboxes get user namespaces.
type UserNS struct {
	// Mode is UserNSAuto, UserNSRequire or UserNSOff ("": off).
	Mode string
	// RootLayers are the host root's filesystems, top first, that a
	// sandbox's root stacks (idmapped) under its own layer: "/" where
	// the root is a plain filesystem; the layers of an overlay root.
	RootLayers []string
	// First and Count are the host ids sandboxes take blocks from.
	First, Count uint32
}

// usernsHidden are hidden from every sandbox in a user namespace, whatever
// the configuration says (one written before it existed, too): its root
// owns the host root's files of uid 0, and these keep root's secrets or
// root-owned state of services. A system account's or another user's
// files of the host root are out of its reach anyway (shownIDs).
var usernsHidden = []string{
	"/var/log", "/var/mail", "/var/spool", "/var/cache/private", "/var/cache/debconf/passwords.dat",
	"/var/lib/systemd", "/var/lib/private", "/var/lib/docker", "/var/lib/containerd", "/var/lib/libvirt",
	"/var/lib/NetworkManager", "/var/lib/bluetooth", "/var/lib/sss", "/var/lib/sudo", "/var/backups",
	"/etc/apt/auth.conf", "/etc/apt/auth.conf.d", "/etc/credstore", "/etc/credstore.encrypted",
	"/etc/NetworkManager/system-connections", "/etc/wireguard", "/etc/openvpn", "/etc/ipsec.secrets",
	"/etc/ipsec.d/private", "/etc/swanctl", "/etc/letsencrypt", "/etc/dkimkeys", "/etc/sssd",
	"/etc/exim4/passwd.client", "/etc/postfix/sasl_passwd", "/etc/mysql/debian.cnf",
	"/etc/cryptsetup-keys.d", "/etc/krb5.keytab", "/etc/ssl/private", "/etc/shadow", "/etc/gshadow",
	"/etc/shadow-", "/etc/gshadow-", "/etc/security/opasswd", "/etc/sudoers", "/etc/sudoers.d",
	"/etc/ssh", "/root", "/home", "/boot",
}

// ErrNoIdmap: the sandbox has no user namespace, so root inside it is the
// host's root, which only root may ask for.
var ErrNoIdmap = errors.New("the sandbox has no user namespace of its own")

// usernsState is what ProbeUserNS found.
type usernsState struct {
	cfg UserNS
	// unavailable says why sandboxes get no user namespace (nil: they do).
	unavailable error
}

type idSpan struct{ first, count uint64 }

// ProbeUserNS finds whether sandboxes can have user namespaces here: the
// pool must idmap, and so must each of the root layers (an overlay
// cannot: its layers must be listed instead). With UserNSRequire, an
// error if not; otherwise the reason is logged and sandboxes are made
// without. Call it once, before serving.
func (s *Supervisor) ProbeUserNS(ctx context.Context) error {
	cfg := s.cfg.UserNS
	s.userns = usernsState{cfg: cfg}
	s.userns.unavailable = idmapUnavailable(cfg, s.cfg.InitCommand, s.cfg.Backend.Info())
	if s.userns.unavailable == nil {
		s.log.Info("sandboxes get user namespaces", "root_layers", strings.Join(cfg.RootLayers, ":"),
			"ids", fmt.Sprintf("%d-%d", cfg.First, uint64(cfg.First)+uint64(cfg.Count)-1))
		return nil
	}
	if cfg.Mode == UserNSRequire {
		return fmt.Errorf("user namespaces are required (sandbox.userns = %q): %w", cfg.Mode, s.userns.unavailable)
	}
	if cfg.Mode == UserNSAuto {
		s.log.Warn("sandboxes get no user namespace: root inside one is for root callers only", "reason", s.userns.unavailable.Error())
	}
	return nil
}

// idmapUnavailable is why sandboxes cannot have user namespaces (nil:
// they can).
func idmapUnavailable(cfg UserNS, initCommand []string, info cowfs.Info) error {
	if cfg.Mode == "" || cfg.Mode == UserNSOff {
		return errors.New("user namespaces are off (sandbox.userns)")
	}
	if !info.Capabilities.Idmap || !info.Capabilities.OverlayUpper {
		why := "it cannot"
		switch {
		case strings.HasPrefix(info.Version, "zfs-fuse"):
			why = "zfs-fuse's FUSE server does not set FUSE_ALLOW_IDMAP; btrfs or OpenZFS 2.2 or later can"
		case info.Backend == "zfs":
			why = "OpenZFS idmaps from 2.2"
		}
		return fmt.Errorf("pool %s (%s %s) cannot make idmapped mounts: %s", info.Root, info.Backend, info.Version, why)
	}
	// Root inside makes set-id files of uid 0 on disk, in its volumes:
	// no host user may reach them.
	if filepath.IsAbs(info.Root) {
		var st unix.Stat_t
		if err := unix.Lstat(info.Root, &st); err != nil {
			return fmt.Errorf("pool %s: %w", info.Root, err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR || st.Uid != 0 || st.Mode&0o077 != 0 {
			return fmt.Errorf("pool %s is mode %04o, owner %d: a set-id file a sandbox's root makes in its volumes would be in host users' reach; make it a directory of root's, mode 0700", info.Root, st.Mode&0o7777, st.Uid)
		}
	}
	if cfg.Count/IDBlock == 0 {
		return fmt.Errorf("the id range %d+%d holds no block of %d ids (sandbox.userns_ids)", cfg.First, cfg.Count, IDBlock)
	}
	if len(cfg.RootLayers) == 0 {
		return errors.New("no root layers (sandbox.root_layers)")
	}
	paths := append(slices.Clone(cfg.RootLayers), info.Root)
	// The probe's namespace maps root to the range's last id, which no
	// host user has (nor, but for an owner of a high id, a sandbox).
	last := uint32(uint64(cfg.First) + uint64(cfg.Count) - 1)
	probe := &nsinit.IDMap{UIDs: []nsinit.Extent{{Host: last, Count: 1}}, GIDs: []nsinit.Extent{{Host: last, Count: 1}}}
	errs, err := nsinit.ProbeIdmap(initCommand, probe, paths...)
	if err != nil {
		return err
	}
	for k, err := range errs {
		if err == nil {
			continue
		}
		if k < len(cfg.RootLayers) {
			return fmt.Errorf("root layer %s: %w (an overlay cannot be idmapped: list its layers in sandbox.root_layers, top first)", paths[k], err)
		}
		return fmt.Errorf("pool %s: %w", paths[k], err)
	}
	return nil
}

// allocateIDs picks the sandbox's block: the lowest of the range that no
// record (recs: all of them, a destroying sandbox's too) and no host id
// holds, and maps owner's ids in it. nil: sandboxes get no user
// namespace here.
func (u *usernsState) allocateIDs(recs []state.Entry, owner uint32) (*state.IDMap, error) {
	if u.unavailable != nil {
		return nil, nil
	}
	// Read at each create: a user added since the daemon started has
	// its ids, and useradd its /etc/subuid range.
	reserved, err := hostIDs()
	if err != nil {
		return nil, err
	}
	// The block's first id owns the sandbox's user namespace (and so has
	// every capability in it): an account the name service knows (LDAP,
	// sssd; not in the files above) must not have it.
	for range 64 {
		m, err := u.allocate(recs, reserved, owner)
		if err != nil || m == nil || !accountHas(m.Base) {
			return m, err
		}
		reserved = append(reserved, idSpan{first: uint64(m.Base), count: 1})
	}
	return nil, fmt.Errorf("no block of %d host ids whose first id is no account's: %w", IDBlock, ErrLimitReached)
}

// accountHas reports whether the name service knows id as a user's or a
// group's.
func accountHas(id uint32) bool {
	n := strconv.FormatUint(uint64(id), 10)
	if _, err := user.LookupId(n); err == nil {
		return true
	}
	_, err := user.LookupGroupId(n)
	return err == nil
}

// allocate is allocateIDs with the host's ids given.
func (u *usernsState) allocate(recs []state.Entry, reserved []idSpan, owner uint32) (*state.IDMap, error) {
	held := map[uint32]bool{}
	for _, r := range recs {
		if r.HasIDs {
			held[r.IDBase] = true
		}
	}
	cfg := u.cfg
	first := (uint64(cfg.First) + IDBlock - 1) / IDBlock * IDBlock
	for b := first; b+IDBlock <= uint64(cfg.First)+uint64(cfg.Count) && b+IDBlock <= 1<<32; b += IDBlock {
		if held[uint32(b)] || reservedIn(reserved, b) {
			continue
		}
		return mapIDs(uint32(b), owner, ownerGroups(owner)), nil
	}
	return nil, fmt.Errorf("no free block of %d host ids in %d+%d for a user namespace (sandbox.userns_ids): %w",
		IDBlock, cfg.First, cfg.Count, ErrLimitReached)
}

// reservedIn reports whether a host id of reserved is in the block at base.
func reservedIn(reserved []idSpan, base uint64) bool {
	for _, r := range reserved {
		if r.first < base+IDBlock && base < r.first+r.count {
			return true
		}
	}
	return false
}

// mapIDs is the user namespace of a sandbox of owner (whose groups are
// groups) in the block at base: every id of the block, inside X at base
// plus X on the host, so that the project's copy, idmapped through it,
// shows every file with its real owner (a service's, another user's).
// An owner's id too high for the block (65536 and above) takes a place
// at the block's top (65535, 65533, ...), which inside is then without
// an id.
func mapIDs(base, owner uint32, groups []uint32) *state.IDMap {
	m := &state.IDMap{Base: base}
	m.UIDs = extents(base, []uint32{owner})
	m.GIDs = extents(base, groups)
	return m
}

// maxHighIDs bounds the owner's ids above the block that get a place in
// it (the kernel takes 340 extents; a user is rarely in so many groups).
const maxHighIDs = 256

func extents(base uint32, extra []uint32) []state.IDExtent {
	var high []uint32
	for _, id := range extra {
		if id >= IDBlock-1 && !slices.Contains(high, id) && len(high) < maxHighIDs {
			high = append(high, id)
		}
	}
	slices.Sort(high) // 65535, if there, takes its own place
	// The high ids from the block's top down (offsets 65535, 65533, ...:
	// nobody's 65534 keeps its own); below the lowest place taken, and
	// at nobody's, each id is its own.
	var es []state.IDExtent
	slot := uint32(IDBlock)
	for _, id := range high {
		slot--
		if slot == nobodyID {
			slot--
		}
		es = append(es, state.IDExtent{Inside: id, Host: base + slot, Count: 1})
	}
	es = append([]state.IDExtent{{Inside: 0, Host: base, Count: slot}}, es...)
	if slot < nobodyID {
		es = append(es, state.IDExtent{Inside: nobodyID, Host: base + nobodyID, Count: 1})
	}
	return es
}

// ownerGroups are owner's uid-named groups: its primary group and the
// others it is in (as the host's user database says now).
func ownerGroups(owner uint32) []uint32 {
	u, err := user.LookupId(strconv.FormatUint(uint64(owner), 10))
	if err != nil {
		return nil
	}
	var out []uint32
	if ids, err := u.GroupIds(); err == nil {
		for _, g := range append([]string{u.Gid}, ids...) {
			if n, err := strconv.ParseUint(g, 10, 32); err == nil {
				out = append(out, uint32(n))
			}
		}
	}
	return out
}

// shownIDs is the narrower map the host root's layers are shown through
// in sandbox rec: root (not the system accounts), nobody, the owner and
// its groups, each at its host id in the sandbox's block. A system
// account's file of the host (a service's state) or one another user
// shares with a system group is nobody's in the sandbox, out of its
// root's reach; its own processes may still be system accounts. (The
// project's copy is shown through the sandbox's whole map instead.)
func shownIDs(rec state.Record) *nsinit.IDMap {
	ns := nsIDs(rec.IDs)
	if ns == nil {
		return nil
	}
	narrow := func(es []nsinit.Extent, own []uint32) []nsinit.Extent {
		var out []nsinit.Extent
		for _, id := range append([]uint32{0, nobodyID}, own...) {
			if len(out) >= maxHighIDs || slices.ContainsFunc(out, func(e nsinit.Extent) bool { return e.Inside == id }) {
				continue
			}
			if host, ok := hostOf(es, id); ok {
				out = append(out, nsinit.Extent{Inside: id, Host: host, Count: 1})
			}
		}
		return out
	}
	return &nsinit.IDMap{UIDs: narrow(ns.UIDs, []uint32{rec.Owner}), GIDs: narrow(ns.GIDs, ownerGroups(rec.Owner))}
}

// hostOf is the host id of inside id in es.
func hostOf(es []nsinit.Extent, id uint32) (uint32, bool) {
	for _, e := range es {
		if id >= e.Inside && id-e.Inside < e.Count {
			return e.Host + id - e.Inside, true
		}
	}
	return 0, false
}

// nsIDs is a record's map as its init takes it.
func nsIDs(m *state.IDMap) *nsinit.IDMap {
	if m == nil {
		return nil
	}
	conv := func(es []state.IDExtent) []nsinit.Extent {
		out := make([]nsinit.Extent, len(es))
		for i, e := range es {
			out[i] = nsinit.Extent{Inside: e.Inside, Host: e.Host, Count: e.Count}
		}
		return out
	}
	return &nsinit.IDMap{UIDs: conv(m.UIDs), GIDs: conv(m.GIDs)}
}

// hostIDs are the ids the host's users and groups have, and the
// subordinate ranges it hands out (/etc/subuid, /etc/subgid).
func hostIDs() ([]idSpan, error) {
	var out []idSpan
	for _, f := range []struct {
		path  string
		field int  // of the id
		span  bool // id:count
	}{{"/etc/passwd", 2, false}, {"/etc/group", 2, false}, {"/etc/subuid", 1, true}, {"/etc/subgid", 1, true}} {
		file, err := os.Open(f.path)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading the host's ids: %w", err)
		}
		sc := bufio.NewScanner(file)
		for sc.Scan() {
			parts := strings.Split(sc.Text(), ":")
			if len(parts) <= f.field {
				continue
			}
			id, err := strconv.ParseUint(parts[f.field], 10, 32)
			if err != nil {
				continue
			}
			span := idSpan{first: id, count: 1}
			if f.span {
				if len(parts) < 3 {
					continue
				}
				if span.count, err = strconv.ParseUint(parts[2], 10, 32); err != nil {
					continue
				}
			}
			out = append(out, span)
		}
		file.Close()
		if err := sc.Err(); err != nil {
			return nil, fmt.Errorf("reading %s: %w", f.path, err)
		}
	}
	return out, nil
}

// execIdentity checks that the command's user exists in the sandbox's
// user namespace, and keeps only the groups that do.
func execIdentity(rec state.Record, req *nsinit.Request) error {
	m := nsIDs(rec.IDs)
	if m == nil {
		return nil
	}
	if !m.HasUID(req.UID) {
		return fmt.Errorf("uid %d has no id in sandbox %s, whose user namespace maps the ids below %d and its owner's (uid %d): %w",
			req.UID, rec.ID, IDBlock, rec.Owner, ErrInvalid)
	}
	if !m.HasGID(req.GID) {
		req.GID = nobodyID
	}
	req.Groups = slices.DeleteFunc(req.Groups, func(g uint32) bool { return !m.HasGID(g) })
	return nil
}
