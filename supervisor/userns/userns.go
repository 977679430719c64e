package userns

import (
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

// Values of Config.Mode.
const (
	// Auto: sandboxes get user namespaces where the kernel, the pool and
	// the root layers allow; elsewhere they are made as without (and
	// root inside is only for root callers).
	Auto = "auto"
	// Require: the daemon does not start where they cannot be had.
	Require = "require"
	// Off: no user namespaces.
	Off = "off"
)

// Block is how many host ids one sandbox holds: a block aligned to it.
const Block = idmap.Block

// Config says whether and how sandboxes get user namespaces.
type Config struct {
	// Mode is Auto, Require or Off ("": off).
	Mode string
	// RootLayers are the host root's filesystems, top first, that a
	// sandbox's root stacks (idmapped) under its own layer: "/" where
	// the root is a plain filesystem; the layers of an overlay root.
	RootLayers []string
	// First and Count are the host ids sandboxes take blocks from.
	First, Count uint32
}

// Hidden are hidden from every sandbox in a user namespace, whatever the
// configuration says (one written before it existed, too): its root
// owns the host root's files of uid 0, and these keep root's secrets or
// root-owned state of services. A system account's or another user's
// files of the host root are out of its reach anyway (idmap.Shown).
var Hidden = []string{
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

// Probe says why sandboxes cannot have user namespaces here (nil: they
// can): the pool must idmap, and so must each of the root layers (an
// overlay cannot: its layers must be listed instead).
func Probe(cfg Config, initCommand []string, info cowfs.Info) error {
	if cfg.Mode == "" || cfg.Mode == Off {
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
	if cfg.Count/Block == 0 {
		return fmt.Errorf("the id range %d+%d holds no block of %d ids (sandbox.userns_ids)", cfg.First, cfg.Count, Block)
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

// Allocate picks a sandbox's block (idmap.Allocate) from cfg's range;
// nil where unavailable says sandboxes get no user namespace here.
func Allocate(cfg Config, unavailable error, recs []state.Entry, owner uint32) (*state.IDMap, error) {
	if unavailable != nil {
		return nil, nil
	}
	return idmap.Allocate(recs, idmap.Range{First: cfg.First, Count: cfg.Count}, owner)
}

// CanBoot says why a booted sandbox cannot be made where its systemd
// would not be contained (nil: it can): without a user namespace it
// would be the host's root, and on the host's network its services
// would bind the host's ports. invalid is the caller's sentinel for the
// latter.
func CanBoot(network string, unavailable, invalid error) error {
	if network == nsinit.NetworkHost {
		return fmt.Errorf("%w: a booted sandbox needs a network of its own (none or allowlist), not the host's: its services would listen on the host", invalid)
	}
	if unavailable != nil {
		return fmt.Errorf("%w: a booted sandbox's systemd must be root of a user namespace, or it would own the machine: %v", ErrNoIdmap, unavailable)
	}
	return nil
}
