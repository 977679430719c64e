package supervisor

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/runtime/nsinit"
	"github.com/sandboxd/sandboxd/supervisor/idmap"
	"github.com/sandboxd/sandboxd/supervisor/state"
)

// Sandboxes in user namespaces: root in their own sandbox, nobody on the
// host. The blocks of host ids they hold and the maps made of them are
// supervisor/idmap's; here is the policy: whether sandboxes get them
// (UserNS, ProbeUserNS) and what a failure to is.

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
const IDBlock = idmap.Block

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
// files of the host root are out of its reach anyway (idmap.Shown).
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

// allocateIDs picks the sandbox's block (idmap.Allocate) from the
// configured range. nil: sandboxes get no user namespace here.
func (u *usernsState) allocateIDs(recs []state.Entry, owner uint32) (*state.IDMap, error) {
	if u.unavailable != nil {
		return nil, nil
	}
	m, err := idmap.Allocate(recs, idmap.Range{First: u.cfg.First, Count: u.cfg.Count}, owner)
	if full := (*idmap.ExhaustedError)(nil); errors.As(err, &full) {
		return nil, fmt.Errorf("%w: %w", err, ErrLimitReached)
	}
	return m, err
}
