// Package config reads sandboxd's configuration file,
// /etc/sandboxd/sandboxd.toml: where the daemon keeps its state, which
// storage pool holds sandboxes, which projects sandboxes are made from, what
// of the host sandboxes see, and the profiles (named sets of sandbox
// settings) that creates pick from.
//
// Reading is strict, because a misspelled key that is silently ignored
// leaves the daemon running with a default the operator meant to change:
// an unknown key (also one that differs only in case), a value of the wrong
// type and a value out of range are all errors, each naming the file, the
// line, the key and what is allowed there.
//
// The file is optional: Load("") reads DefaultPath, and if there is no file
// there, Default applies. A path given explicitly must exist.
package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/sandboxd/sandboxd/cowfs/pool"
	"github.com/sandboxd/sandboxd/sandboxd1"
)

// DefaultPath is where the daemon looks for its configuration when none is
// named.
const DefaultPath = "/etc/sandboxd/sandboxd.toml"

// Values of limits.on_user_limit.
const (
	OnUserLimitRefuse        = "refuse"
	OnUserLimitDestroyOldest = "destroy-oldest"
)

// Storage backends, the values of storage.backend.
const (
	// BackendEmbedded: a sparse btrfs image that sandboxd makes and
	// loop-mounts; nothing else on the machine changes.
	BackendEmbedded = pool.Embedded
	// BackendBtrfs: a directory on an existing btrfs filesystem.
	BackendBtrfs = pool.Btrfs
	// BackendZFS: a dataset of an existing ZFS pool.
	BackendZFS = pool.ZFS
)

// Config is the whole configuration file. Each field's toml tag is its key
// in the file; keys are matched exactly, case included.
type Config struct {
	Daemon   Daemon    `toml:"daemon"`
	Storage  Storage   `toml:"storage"`
	Limits   Limits    `toml:"limits"`
	Access   Access    `toml:"access"`
	Projects []Project `toml:"project"`
	Sandbox  Sandbox   `toml:"sandbox"`
	// Profiles are the file's [profile.NAME] tables, by name. The
	// built-in profiles are not in it: use Profile and ProfileNames,
	// which know them.
	Profiles map[string]Profile `toml:"profile"`
	// Stages are the [[stage]] list, in order: where a promotion carries
	// a sandbox's changes. Without any, there is one: "project".
	Stages []Stage `toml:"stage"`
	// Metrics is where the Prometheus metrics are served, if anywhere.
	Metrics Metrics `toml:"metrics"`
}

// Stage targets other than a path or an ssh:// address.
const (
	// TargetProject is the sandbox's own project.
	TargetProject = "project"
	// ProjectPlaceholder in a target is replaced by the project's name.
	ProjectPlaceholder = "{project}"
)

// Values of stage.approval.
const (
	ApprovalAuto  = "auto"
	ApprovalAdmin = "admin"
)

// Stage is one [[stage]] entry.
type Stage struct {
	Name string `toml:"name"`
	// Target is "project", an absolute path on this host, or
	// ssh://[user@]host[:port]/path; "{project}" in it is replaced by the
	// project's name. A path or ssh target is a replica on btrfs that
	// sandboxd keeps by send and receive.
	Target string `toml:"target"`
	// Checks are shell commands run against the promoted state; each
	// must exit 0 for the stage to pass.
	Checks []string `toml:"checks"`
	// CheckTimeout bounds each check (0: 10 minutes).
	CheckTimeout Duration `toml:"check_timeout"`
	// Approval is "auto" or "admin": an admin must approve the stage
	// before anything is applied to it.
	Approval string `toml:"approval"`
	// SSHOptions are extra ssh arguments for an ssh target, like
	// ["-i", "/etc/sandboxd/id_ed25519"].
	SSHOptions []string `toml:"ssh_options"`
}

// DefaultStages is the list without any [[stage]]: the project alone.
func DefaultStages() []Stage {
	return []Stage{{Name: "project", Target: TargetProject, Approval: ApprovalAuto}}
}

// StageList is the configured stages, or DefaultStages.
func (c *Config) StageList() []Stage {
	if len(c.Stages) == 0 {
		return DefaultStages()
	}
	return c.Stages
}

// Access is the [access] section: who may use sandboxd through its D-Bus
// API, by user and group names (or numeric ids). Root may always do
// everything. The bus policy (org.sandboxd1.conf) must let the same
// groups talk to sandboxd at all.
type Access struct {
	// CreatorUsers and the members of CreatorGroups may create sandboxes;
	// each sees and acts on its own.
	CreatorUsers  []string `toml:"creator_users"`
	CreatorGroups []string `toml:"creator_groups"`
	// AdminUsers and the members of AdminGroups see and act on every
	// sandbox.
	AdminUsers  []string `toml:"admin_users"`
	AdminGroups []string `toml:"admin_groups"`
}

// Daemon is the [daemon] section.
type Daemon struct {
	// StateDir holds the daemon's own records of its sandboxes.
	StateDir string `toml:"state_dir"`
	// LogLevel is debug, info, warn or error.
	LogLevel string `toml:"log_level"`
	// AuditLog is the append-only log of every state-changing call.
	AuditLog string `toml:"audit_log"`
	// AuditMaxSize is the audit log's size past which the daemon renames
	// it to audit.log.1 (the older ones one number up) and starts a fresh
	// one; AuditKeep is how many files are kept in all, the live one
	// with them: the log holds at most AuditKeep × AuditMaxSize bytes.
	AuditMaxSize Size `toml:"audit_max_size"`
	AuditKeep    int  `toml:"audit_keep"`
}

// The audit log's bounds: a file must hold many lines of up to a few
// KiB; a few files at least, and not so many that the daemon renames
// hundreds at a rotation.
const (
	MinAuditMaxSize = 1 * MiB
	MaxAuditKeep    = 100
)

// Limits is the [limits] section: admission control and time to live.
// Zero means no cap.
type Limits struct {
	// MaxSandboxes caps the sandboxes alive at once, over all users.
	MaxSandboxes int `toml:"max_sandboxes"`
	// MaxSandboxesPerUser caps one user's live sandboxes.
	MaxSandboxesPerUser int `toml:"max_sandboxes_per_user"`
	// MaxAdoptionsPerUser caps the directories one member of group
	// sandboxd (not an admin) has adopted as its own projects, those
	// under way included: each holds a copy of its files in the pool.
	MaxAdoptionsPerUser int `toml:"max_adoptions_per_user"`
	// OnUserLimit is what a create beyond MaxSandboxesPerUser does:
	// "refuse" it, or "destroy-oldest" of that user's sandboxes first.
	OnUserLimit string `toml:"on_user_limit"`
	// MaxMemory caps the sum of the live sandboxes' MemoryMax (a
	// sandbox's ceiling, which most never reach: SliceMemoryMax bounds
	// what they use).
	MaxMemory MemoryShare `toml:"max_memory"`
	// DefaultMemoryMax is given to a sandbox created without a MemoryMax
	// (its own or its profile's); 0: derived from the host, a quarter of
	// its memory and at most 4GiB.
	DefaultMemoryMax Size `toml:"default_memory_max"`
	// DefaultTasksMax is given to a sandbox created without a TasksMax;
	// 0: derived, 4096 (less on a host whose pid_max is small).
	DefaultTasksMax int `toml:"default_tasks_max"`
	// DefaultDiskQuota is given to a sandbox created without a disk
	// quota; 0: derived, a tenth of the pool's size.
	DefaultDiskQuota Size `toml:"default_disk_quota"`
	// UserMemoryMax and UserTasksMax bound all the sandboxes of one user
	// together (their owner's slice); 0: no such bound.
	UserMemoryMax MemoryShare `toml:"user_memory_max"`
	UserTasksMax  TaskShare   `toml:"user_tasks_max"`
	// SliceMemoryMax and SliceTasksMax bound all sandboxes together
	// (sandboxd.slice), leaving the host the rest; 0: no such bound.
	SliceMemoryMax MemoryShare `toml:"slice_memory_max"`
	SliceTasksMax  TaskShare   `toml:"slice_tasks_max"`
	// CacheQuota bounds each user's cache volume, which all of that
	// user's sandboxes share at /var/cache/sandbox (pip, npm, Go,
	// cargo); 0: no bound.
	CacheQuota Size `toml:"cache_quota"`
	// MaxCheckpoints caps one sandbox's checkpoints; 0: 32.
	MaxCheckpoints int `toml:"max_checkpoints"`
	// Pool is how many ready sandboxes each owner keeps of each project
	// he makes sandboxes of (a warm pool: a create claims one); 0: none.
	// A project's own pool setting overrides it.
	Pool int `toml:"pool"`
	// DefaultTTL is given to a sandbox created without a time to live;
	// MaxTTL bounds any.
	DefaultTTL Duration `toml:"default_ttl"`
	// IdleFreeze freezes a sandbox with no running command, background
	// process or port connection for this long; the next call or
	// connection thaws it. 0: never.
	IdleFreeze Duration `toml:"idle_freeze"`
	// IdleStop stops a sandbox idle for this long (after IdleFreeze
	// froze it, if set); the next call or connection starts it. 0:
	// never.
	IdleStop Duration `toml:"idle_stop"`
	MaxTTL   Duration `toml:"max_ttl"`
}

// Metrics is the [metrics] section: where the daemon serves its
// Prometheus metrics, if anywhere.
type Metrics struct {
	// Listen is "" (no metrics, the default), "unix:/absolute/path" (a
	// socket of mode 0660, root's) or a loopback IP and port
	// ("127.0.0.1:9477", "[::1]:9477"). Nothing else: the metrics name
	// owners (uids) and their usage, which are not for the network; a
	// Prometheus elsewhere scrapes through an agent on the host.
	Listen string `toml:"listen"`
	// Group (a name or numeric id) owns the unix socket, so that its
	// members may scrape; "": root's group, root alone.
	Group string `toml:"group"`
}

// Storage is the [storage] section: which pool holds sandboxes. Only the
// subsection that Backend names is used, but all are checked.
type Storage struct {
	Backend  string   `toml:"backend"`
	Embedded Embedded `toml:"embedded"`
	Btrfs    Btrfs    `toml:"btrfs"`
	ZFS      ZFS      `toml:"zfs"`
}

// Embedded is [storage.embedded]: the image file the embedded pool lives in.
type Embedded struct {
	Image      string `toml:"image"`
	Size       Size   `toml:"size"`
	Mountpoint string `toml:"mountpoint"`
}

// Btrfs is [storage.btrfs].
type Btrfs struct {
	// Root is a directory on a btrfs filesystem; required with backend btrfs.
	Root string `toml:"root"`
}

// ZFS is [storage.zfs].
type ZFS struct {
	// Root is a dataset (pool/child...); required with backend zfs.
	Root string `toml:"root"`
}

// Project is one [[project]] entry: a volume that sandboxes are cloned from.
// Exactly one of Path and Dataset is set.
type Project struct {
	Name    string `toml:"name"`
	Path    string `toml:"path"`    // a btrfs subvolume
	Dataset string `toml:"dataset"` // a ZFS dataset
	// Users and Groups (names or numeric ids) may use the project, besides
	// root and admins. With neither, its directory's owner may, and its
	// group's members when the directory is group-writable.
	Users  []string `toml:"users"`
	Groups []string `toml:"groups"`
	// Units are host services ("nginx.service") whose environment, as
	// their Environment= and EnvironmentFile= settings make it, every
	// command in the project's sandboxes gets, read when a sandbox is
	// made; Env are KEY=value entries over theirs (an entry wins).
	Units []string `toml:"units"`
	Env   []string `toml:"env"`
	// Ignore are patterns in gitignore syntax of paths that never leave a
	// sandbox: diff, try and promotion leave them out (with the
	// project's .sandboxignore after them).
	Ignore []string `toml:"ignore"`
	// Pool overrides limits.pool for this project (nil: limits.pool).
	Pool *int `toml:"pool"`
}

// Default returns the configuration that applies with no file, and whose
// values fill in whatever a file leaves out.
func Default() *Config {
	return &Config{
		Daemon: Daemon{
			StateDir:     "/var/lib/sandboxd",
			LogLevel:     "info",
			AuditLog:     "/var/log/sandboxd/audit.log",
			AuditMaxSize: 64 * MiB,
			AuditKeep:    4,
		},
		Access: Access{
			CreatorUsers:  []string{},
			CreatorGroups: []string{"sandboxd"},
			AdminUsers:    []string{},
			AdminGroups:   []string{},
		},
		Limits: Limits{
			MaxSandboxes:        256,
			MaxSandboxesPerUser: 32,
			MaxAdoptionsPerUser: 8,
			OnUserLimit:         OnUserLimitRefuse,
			CacheQuota:          2 * GiB,
			// The host keeps a quarter of its memory and tasks whatever
			// the sandboxes do; one user may take a third of the
			// sandboxes' part; the MemoryMax promised (the derived one
			// is 4GiB at most) may be 8 times the memory, as ceilings
			// are seldom reached and the slices bound what is used.
			SliceMemoryMax: MemoryShare{Percent: 75},
			SliceTasksMax:  TaskShare{Percent: 75},
			UserMemoryMax:  MemoryShare{Percent: 25},
			UserTasksMax:   TaskShare{Percent: 25},
			MaxMemory:      MemoryShare{Percent: 800},
			DefaultTTL:     Duration(sandboxd1.DefaultTTL),
		},
		Storage: Storage{
			Backend: BackendEmbedded,
			Embedded: Embedded{
				Image:      "/var/lib/sandboxd/pool.img",
				Size:       20 * GiB,
				Mountpoint: "/var/lib/sandboxd/pool",
			},
		},
		Sandbox: Sandbox{
			HiddenPaths: []string{
				"/root", "/home", "/var/lib/sandboxd", "/var/log/sandboxd",
				"/etc/sandboxd", "/etc/shadow", "/etc/gshadow", "/etc/ssh",
				"/etc/shadow-", "/etc/gshadow-", "/etc/security/opasswd",
				"/etc/sudoers", "/etc/sudoers.d", "/etc/ssl/private",
				"/etc/krb5.keytab", "/var/backups", "/var/lib/sudo",
			},
			ReadonlyPaths:  []string{},
			DefaultProfile: ProfileDefault,
			UserNS:         UserNSAuto,
			RootLayers:     []string{"/"},
			UserNSFirstID:  DefaultUserNSFirstID,
			UserNSIDCount:  DefaultUserNSIDCount,
		},
	}
}

// Load reads and checks the file at path. With path "", it reads
// DefaultPath, and a missing file there gives Default(); a missing file at
// a path given explicitly is an error (wrapping fs.ErrNotExist).
func Load(path string) (*Config, error) {
	if path == "" {
		return load(DefaultPath, true)
	}
	return load(path, false)
}

func load(path string, optional bool) (*Config, error) {
	data, err := os.ReadFile(path)
	if optional && errors.Is(err, fs.ErrNotExist) {
		return Default(), nil
	}
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	return Parse(data, path)
}

// Parse reads and checks a configuration file's contents; name (the file's
// path, usually) begins each error message. The problems found are returned
// together, each an *Error, joined with errors.Join; all wrap ErrInvalid.
func Parse(data []byte, name string) (*Config, error) {
	d, err := parseDoc(string(data))
	if err != nil {
		return nil, syntaxError(name, err)
	}
	w := newWhere(d)
	// Unknown keys first: with them out of the way, every key the decoder
	// meets is a field's exact name, which decodeError relies on.
	if errs := append(unknownKeys(name, w), notTables(name, w)...); len(errs) > 0 {
		return nil, joinErrors(errs)
	}
	c := Default()
	if err := d.md.PrimitiveDecode(d.top, c); err != nil {
		return nil, decodeError(name, w, err)
	}
	if err := c.validate(name, w); err != nil {
		return nil, err
	}
	return c, nil
}

// Pool is what cowfs/pool needs to open the pool this section names.
func (s Storage) Pool() pool.Config {
	return pool.Config{
		Backend:    s.Backend,
		Image:      s.Embedded.Image,
		Size:       uint64(s.Embedded.Size),
		Mountpoint: s.Embedded.Mountpoint,
		BtrfsRoot:  s.Btrfs.Root,
		ZFSRoot:    s.ZFS.Root,
	}
}
