package config

import (
	"fmt"
	"maps"
	"net/url"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/BurntSushi/toml"
	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/cowfs/pool"
	"github.com/sandboxd/sandboxd/promote/replica"
	"github.com/sandboxd/sandboxd/sandboxd1"
)

var (
	logLevels = []string{"debug", "info", "warn", "error"}
	backends  = []string{BackendEmbedded, BackendBtrfs, BackendZFS}
)

// minImageSize: btrfs keeps about 100MiB of a small filesystem for
// itself; 256MiB leaves room for sandboxes.
const minImageSize = Size(pool.MinEmbeddedSize)

// Validate checks every value, returning all problems found, joined, each
// an *Error wrapping ErrInvalid. Load and Parse call it.
func (c *Config) Validate() error { return c.validate("", nil) }

// validator collects problems, placing each at its line when w (the
// file's text) is known.
type validator struct {
	file string
	w    *where
	errs []*Error
}

func (v *validator) add(line int, key string, cause error, format string, args ...any) {
	v.errs = append(v.errs, &Error{File: v.file, Line: line, Key: key, Msg: fmt.Sprintf(format, args...), Err: cause})
}

// accountName is a user or group in a project's users and groups: a
// number, or a name as useradd(8) takes it.
var accountName = regexp.MustCompile(`^(?:[0-9]+|[a-zA-Z_][a-zA-Z0-9_.-]{0,31}\$?)$`)

// projectLine is where key is set in project i, or its header with key "".
// MaxPool bounds a warm pool's size (limits.pool, a project's pool).
const MaxPool = 256

func (v *validator) projectLine(i int, key string) int {
	var rest toml.Key
	if key != "" {
		rest = toml.Key{key}
	}
	return v.w.elemLine(toml.Key{"project"}, i, rest)
}

func (c *Config) validate(file string, w *where) error {
	v := &validator{file: file, w: w}

	d := c.Daemon
	v.path(w.line("daemon", "state_dir"), "daemon.state_dir", d.StateDir)
	v.path(w.line("daemon", "audit_log"), "daemon.audit_log", d.AuditLog)
	if d.AuditMaxSize < MinAuditMaxSize {
		v.add(w.line("daemon", "audit_max_size"), "daemon.audit_max_size", nil,
			"daemon.audit_max_size = %s is too small: at least %s", d.AuditMaxSize, MinAuditMaxSize)
	}
	if d.AuditKeep < 2 || d.AuditKeep > MaxAuditKeep {
		v.add(w.line("daemon", "audit_keep"), "daemon.audit_keep", nil,
			"daemon.audit_keep = %d: want 2 to %d files (the live one and the rotated ones)", d.AuditKeep, MaxAuditKeep)
	}

	a := c.Access
	for _, list := range []struct {
		key   string
		names []string
	}{{"creator_users", a.CreatorUsers}, {"creator_groups", a.CreatorGroups}, {"admin_users", a.AdminUsers}, {"admin_groups", a.AdminGroups}} {
		for _, n := range list.names {
			if n == "" || strings.ContainsAny(n, ":/ \t\n\x00") {
				v.add(w.line("access", list.key), "access."+list.key, nil, "access.%s holds %q: want user or group names, or numeric ids", list.key, n)
			}
		}
	}

	l := c.Limits
	for _, n := range []struct {
		key string
		val int
	}{{"max_sandboxes", l.MaxSandboxes}, {"max_sandboxes_per_user", l.MaxSandboxesPerUser},
		{"max_adoptions_per_user", l.MaxAdoptionsPerUser},
		{"default_tasks_max", l.DefaultTasksMax}, {"max_checkpoints", l.MaxCheckpoints}, {"pool", l.Pool}} {
		if n.val < 0 {
			v.add(w.line("limits", n.key), "limits."+n.key, nil, "limits.%s = %d is negative: want 0 or more", n.key, n.val)
		}
	}
	if l.Pool > MaxPool {
		v.add(w.line("limits", "pool"), "limits.pool", nil, "limits.pool = %d is over %d: want at most %d ready sandboxes per project and owner", l.Pool, MaxPool, MaxPool)
	}
	v.oneOf(w.line("limits", "on_user_limit"), "limits.on_user_limit", l.OnUserLimit, []string{OnUserLimitRefuse, OnUserLimitDestroyOldest})
	if l.MaxTTL > 0 && l.DefaultTTL > l.MaxTTL {
		v.add(w.line("limits", "default_ttl"), "limits.default_ttl", nil, "limits.default_ttl = %s is longer than limits.max_ttl = %s", l.DefaultTTL, l.MaxTTL)
	}
	if l.DefaultMemoryMax != 0 && sandboxd1.Size(l.DefaultMemoryMax) < sandboxd1.MinMemoryMax {
		v.add(w.line("limits", "default_memory_max"), "limits.default_memory_max", nil,
			"limits.default_memory_max = %s is too small: a sandbox's init and a shell need at least %s", l.DefaultMemoryMax, Size(sandboxd1.MinMemoryMax))
	}
	if l.MaxMemory.Percent == 0 && l.MaxMemory.Bytes > 0 && l.DefaultMemoryMax > l.MaxMemory.Bytes {
		v.add(w.line("limits", "default_memory_max"), "limits.default_memory_max", nil, "limits.default_memory_max = %s is more than limits.max_memory = %s", l.DefaultMemoryMax, l.MaxMemory)
	}
	for _, m := range []struct {
		key   string
		share MemoryShare
	}{{"user_memory_max", l.UserMemoryMax}, {"slice_memory_max", l.SliceMemoryMax}} {
		if m.share.Percent > 100 {
			v.add(w.line("limits", m.key), "limits."+m.key, nil, "limits.%s = %s is more than the machine's memory: want at most 100%%", m.key, m.share)
		}
		if !m.share.IsZero() && m.share.Percent == 0 && sandboxd1.Size(m.share.Bytes) < sandboxd1.MinMemoryMax {
			v.add(w.line("limits", m.key), "limits."+m.key, nil, "limits.%s = %s is too small: a sandbox's init and a shell need at least %s", m.key, m.share, Size(sandboxd1.MinMemoryMax))
		}
	}
	v.oneOf(w.line("daemon", "log_level"), "daemon.log_level", d.LogLevel, logLevels)

	s := c.Storage
	v.oneOf(w.line("storage", "backend"), "storage.backend", s.Backend, backends)
	v.path(w.line("storage", "embedded", "image"), "storage.embedded.image", s.Embedded.Image)
	v.path(w.line("storage", "embedded", "mountpoint"), "storage.embedded.mountpoint", s.Embedded.Mountpoint)
	if s.Embedded.Size < minImageSize {
		v.add(w.line("storage", "embedded", "size"), "storage.embedded.size", nil,
			"storage.embedded.size = %q is too small: at least %s", s.Embedded.Size, minImageSize)
	}
	switch {
	case s.Btrfs.Root != "":
		v.path(w.line("storage", "btrfs", "root"), "storage.btrfs.root", s.Btrfs.Root)
	case s.Backend == BackendBtrfs:
		v.add(w.line("storage", "backend"), "storage.btrfs.root", nil,
			`storage.btrfs.root is required with storage.backend = "btrfs": the absolute path of a directory on a btrfs filesystem`)
	}
	switch {
	case s.ZFS.Root != "":
		v.dataset(w.line("storage", "zfs", "root"), "storage.zfs.root", s.ZFS.Root)
	case s.Backend == BackendZFS:
		v.add(w.line("storage", "backend"), "storage.zfs.root", nil,
			`storage.zfs.root is required with storage.backend = "zfs": a dataset of an existing pool, like "tank/sandboxd"`)
	}

	first := map[string]int{} // project name -> index of its first use
	for i, p := range c.Projects {
		key := func(k string) string { return elemName(toml.Key{"project"}, i, toml.Key{k}) }
		nameLine := v.projectLine(i, "name")
		if err := cowfs.ValidateName(p.Name); err != nil {
			what := fmt.Sprintf("%s = %q is not a valid name", key("name"), p.Name)
			if p.Name == "" {
				what = key("name") + " is missing or empty"
			}
			v.add(nameLine, key("name"), err, "%s: "+nameRule, what, cowfs.MaxNameLen)
		} else if j, dup := first[p.Name]; dup {
			at := ""
			if l := v.projectLine(j, "name"); l > 0 {
				at = fmt.Sprintf(" at line %d", l)
			}
			v.add(nameLine, key("name"), nil, "%s = %q is taken: project[%d]%s has that name; each project needs its own",
				key("name"), p.Name, j, at)
		} else {
			first[p.Name] = i
		}

		const which = "give exactly one: path for a btrfs subvolume, dataset for a ZFS dataset"
		switch {
		case p.Path != "" && p.Dataset != "":
			v.add(v.projectLine(i, ""), elemName(toml.Key{"project"}, i, nil), nil,
				"project[%d] (%q) has both path = %q and dataset = %q: %s", i, p.Name, p.Path, p.Dataset, which)
		case p.Path != "":
			v.path(v.projectLine(i, "path"), key("path"), p.Path)
		case p.Dataset != "":
			v.dataset(v.projectLine(i, "dataset"), key("dataset"), p.Dataset)
		default:
			v.add(v.projectLine(i, ""), elemName(toml.Key{"project"}, i, nil), nil,
				"project[%d] (%q) has neither path nor dataset: %s", i, p.Name, which)
		}
		for _, l := range []struct {
			key   string
			names []string
		}{{"users", p.Users}, {"groups", p.Groups}} {
			for _, n := range l.names {
				if !accountName.MatchString(n) {
					v.add(v.projectLine(i, l.key), key(l.key), nil,
						"%s: %q is not a name or a numeric id (a name as useradd takes it: letters, digits, '_', '.', '-', at most 32)", key(l.key), n)
				}
			}
		}
		v.projectEnv(i, p)
		if p.Pool != nil && (*p.Pool < 0 || *p.Pool > MaxPool) {
			v.add(v.projectLine(i, "pool"), key("pool"), nil, "%s = %d: want 0 to %d ready sandboxes per owner", key("pool"), *p.Pool, MaxPool)
		}
		v.projectIgnore(i, p)
	}

	v.sandbox(c)
	v.stages(c)
	v.metrics(c)

	if len(v.errs) == 0 {
		return nil
	}
	return joinErrors(v.errs)
}

const nameRule = "use letters, digits, '-', '_' and '.', not starting with '.' or '-', at most %d bytes"

// sandbox checks [sandbox] and the [profile.NAME] tables.
func (v *validator) sandbox(c *Config) {
	w, s := v.w, c.Sandbox
	v.paths(w.line("sandbox", "hidden_paths"), "sandbox.hidden_paths", s.HiddenPaths,
		w.line("sandbox", "readonly_paths"), "sandbox.readonly_paths", s.ReadonlyPaths)
	v.userns(c)
	if _, ok := c.Profile(s.DefaultProfile); !ok {
		v.add(w.line("sandbox", "default_profile"), "sandbox.default_profile", nil,
			"sandbox.default_profile = %q names no profile: use one of %s, or add [%s]",
			s.DefaultProfile, strings.Join(c.ProfileNames(), ", "), toml.Key{"profile", s.DefaultProfile})
	}

	for _, name := range slices.Sorted(maps.Keys(c.Profiles)) {
		p := c.Profiles[name]
		table := toml.Key{"profile", name}
		key := func(k string) string { return append(table[:2:2], k).String() }
		line := func(k string) int { return w.line(append(table[:2:2], k)...) }
		if err := cowfs.ValidateName(name); err != nil {
			v.add(w.line(table...), table.String(), err, "[%s]: %q is not a valid profile name: "+nameRule,
				table, name, cowfs.MaxNameLen)
		}

		network := p.NetworkMode()
		if p.Network != nil {
			v.oneOf(line("network"), key("network"), network, []string{NetworkNone, NetworkAllowlist, NetworkHost})
		}
		switch {
		case network == NetworkAllowlist && len(p.Allow) == 0:
			l := line("network")
			if p.Allow != nil {
				l = line("allow")
			}
			v.add(l, key("allow"), nil, `%s = "allowlist" needs %s: a non-empty list of destinations like "example.com:443"`,
				key("network"), key("allow"))
		case network != NetworkAllowlist && len(p.Allow) > 0:
			v.add(line("allow"), key("allow"), nil, `%s is set, but %s is %q: allow is only for network = "allowlist"`,
				key("allow"), key("network"), network)
		}
		for _, a := range p.Allow {
			if !strings.Contains(a, ":") {
				v.add(line("allow"), key("allow"), nil,
					`%s holds %q: want host:port entries like "example.com:443", "*.example.com:*", "10.0.0.0/8:80" or "[::1]:8080"`,
					key("allow"), a)
			}
		}
		if p.MemoryMax != nil && *p.MemoryMax != 0 && sandboxd1.Size(*p.MemoryMax) < sandboxd1.MinMemoryMax {
			v.add(line("memory_max"), key("memory_max"), nil, "%s = %s is too small: a sandbox's init and a shell need at least %s",
				key("memory_max"), *p.MemoryMax, Size(sandboxd1.MinMemoryMax))
		}
		if p.TasksMax != nil && *p.TasksMax < 1 {
			v.add(line("tasks_max"), key("tasks_max"), nil, "%s = %d is too small: want 1 or more", key("tasks_max"), *p.TasksMax)
		}
		v.paths(line("hidden_paths"), key("hidden_paths"), p.HiddenPaths,
			line("readonly_paths"), key("readonly_paths"), p.ReadonlyPaths)
	}
}

func (v *validator) oneOf(line int, key, value string, allowed []string) {
	if !slices.Contains(allowed, value) {
		v.add(line, key, nil, "%s = %q is not allowed: use %s", key, value, strings.Join(allowed, ", "))
	}
}

// path checks for an absolute, clean path: sandboxd works with paths as
// given, and "a/../b" or a relative path would depend on where it runs.
func (v *validator) path(line int, key, p string) {
	if problem := pathProblem(p); problem != "" {
		v.add(line, key, nil, `%s = %q %s: want an absolute path with no ".", ".." or empty elements`, key, p, problem)
	}
}

// pathProblem says what keeps p from being an absolute, clean path, or "".
func pathProblem(p string) string {
	switch {
	case p == "":
		return "is empty"
	case strings.IndexByte(p, 0) >= 0:
		return "holds a NUL byte"
	case !path.IsAbs(p):
		return "is not absolute"
	case slices.Contains(strings.Split(p, "/"), ".."):
		return `has a ".." element`
	case path.Clean(p) != p:
		return fmt.Sprintf("is not clean (%q is)", path.Clean(p))
	}
	return ""
}

// paths checks a table's lists of hidden and read-only host paths: each
// path absolute and clean, not "/" (which would be the whole host), and
// listed once, in one of the two.
func (v *validator) paths(hiddenLine int, hiddenKey string, hidden []string, readonlyLine int, readonlyKey string, readonly []string) {
	const want = `want absolute paths with no ".", ".." or empty elements, other than "/"`
	in := map[string]string{} // path -> the key of the list it is in
	for _, list := range []struct {
		line  int
		key   string
		paths []string
	}{{hiddenLine, hiddenKey, hidden}, {readonlyLine, readonlyKey, readonly}} {
		for _, p := range list.paths {
			problem := pathProblem(p)
			if p == "/" {
				problem = "is the whole host"
			}
			switch other, dup := in[p]; {
			case problem != "":
				v.add(list.line, list.key, nil, "%s holds %q, which %s: %s", list.key, p, problem, want)
			case dup && other == list.key:
				v.add(list.line, list.key, nil, "%s holds %q twice: list each path once", list.key, p)
			case dup:
				v.add(list.line, list.key, nil, "%s holds %q, as %s does: a path is hidden or read-only, not both",
					list.key, p, other)
			default:
				in[p] = list.key
			}
		}
	}
}

// dataset checks a ZFS dataset name below a pool: pool/child...
func (v *validator) dataset(line int, key, name string) {
	if problem := cowfs.DatasetNameProblem(name); problem != "" {
		v.add(line, key, nil, `%s = %q %s: want pool/child like "tank/sandboxd", of letters, digits, '_', '-', '.' and ':' joined by single "/"`,
			key, name, problem)
	}
}

// stages checks the [[stage]] list: names, targets, approvals.
func (v *validator) stages(c *Config) {
	seen := map[string]int{}
	for i, st := range c.Stages {
		key := func(k string) string { return elemName(toml.Key{"stage"}, i, toml.Key{k}) }
		line := func(k string) int {
			var rest toml.Key
			if k != "" {
				rest = toml.Key{k}
			}
			return v.w.elemLine(toml.Key{"stage"}, i, rest)
		}
		if err := cowfs.ValidateName(st.Name); err != nil {
			v.add(line("name"), key("name"), err, "%s = %q is not a valid stage name: "+nameRule, key("name"), st.Name, cowfs.MaxNameLen)
		} else if j, dup := seen[st.Name]; dup {
			v.add(line("name"), key("name"), nil, "%s = %q is taken by stage[%d]: each stage needs its own name", key("name"), st.Name, j)
		} else {
			seen[st.Name] = i
		}
		if st.Target == TargetProject && i != 0 {
			v.add(line("target"), key("target"), nil, `%s = "project": the project must be the first stage, which the others are fed from`, key("target"))
		}
		v.stageTarget(line("target"), key("target"), st.Target)
		if i == 0 && st.Target != TargetProject {
			v.add(line("target"), key("target"), nil, `%s = %q: the first stage must be the project (target = "project")`, key("target"), st.Target)
		}
		if st.Approval != "" {
			v.oneOf(line("approval"), key("approval"), st.Approval, []string{ApprovalAuto, ApprovalAdmin})
		}
		for _, ch := range st.Checks {
			if strings.TrimSpace(ch) == "" {
				v.add(line("checks"), key("checks"), nil, "%s holds an empty command", key("checks"))
			}
		}
		if st.Target != TargetProject && len(st.Checks) > 0 {
			// They would run outside any sandbox, as root here or as the
			// ssh user there, executing files the sandbox wrote.
			v.add(line("checks"), key("checks"), nil, "%s: the checks of stage %s (target %s) would run outside a sandbox: not supported; put checks on the project stage",
				key("checks"), st.Name, st.Target)
		}
		if st.CheckTimeout < 0 {
			v.add(line("check_timeout"), key("check_timeout"), nil, "%s is negative", key("check_timeout"))
		}
	}
}

// stageTarget checks a stage's target as the promotion will read it
// (replica.ParseTarget), with {project} standing for a project's name, so
// that a config that loads never fails at promotion for its target. A
// path is to be written clean, as every path in the file.
func (v *validator) stageTarget(line int, key, target string) {
	named := strings.ReplaceAll(target, ProjectPlaceholder, "x")
	t, err := replica.ParseTarget(named)
	if err != nil {
		v.add(line, key, err, "%s: %v", key, err)
		return
	}
	switch t.Kind {
	case replica.TargetPath:
		v.path(line, key, named)
	case replica.TargetSSH:
		if u, err := url.Parse(named); err == nil && path.Clean(u.Path) != u.Path {
			v.add(line, key, nil, "%s = %q: its path is not clean (%q is)", key, target, path.Clean(u.Path))
		}
	}
}

// userns checks sandbox.userns, root_layers and the id range.
func (v *validator) userns(c *Config) {
	w, s := v.w, c.Sandbox
	switch s.UserNS {
	case UserNSAuto, UserNSRequire, UserNSOff:
	default:
		v.add(w.line("sandbox", "userns"), "sandbox.userns", nil,
			"sandbox.userns = %q: use %q, %q or %q", s.UserNS, UserNSAuto, UserNSRequire, UserNSOff)
	}
	if s.UserNS == UserNSOff {
		return
	}
	if len(s.RootLayers) == 0 {
		v.add(w.line("sandbox", "root_layers"), "sandbox.root_layers", nil,
			"sandbox.root_layers is empty: list the host root's filesystems, top first (\"/\" for a plain root)")
	}
	for _, p := range s.RootLayers {
		if !filepath.IsAbs(p) || filepath.Clean(p) != p || strings.ContainsAny(p, ",:\\\n") {
			v.add(w.line("sandbox", "root_layers"), "sandbox.root_layers", nil,
				"sandbox.root_layers: %q is not an absolute, clean path without ',', ':' or '\\'", p)
		}
	}
	if uint64(s.UserNSFirstID)+uint64(s.UserNSIDCount) > 1<<32 || s.UserNSIDCount < 1<<16 {
		v.add(w.line("sandbox", "userns_id_count"), "sandbox.userns_id_count", nil,
			"sandbox.userns_first_id = %d and userns_id_count = %d: the range must hold at least 65536 ids and end below 2^32",
			s.UserNSFirstID, s.UserNSIDCount)
	}
}
