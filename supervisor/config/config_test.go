package config

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/cowfs/pool"
)

const repoConfig = "../../sandboxd.toml"

// The repo's sandboxd.toml, as shipped, is Default(): every key in it is set
// to its default, and the examples (the [[project]] entries, storage.btrfs.root
// and storage.zfs.root, which have no default) are commented out.
func TestRepoConfigIsDefault(t *testing.T) {
	c, err := Load(repoConfig)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(c, Default()) {
		t.Errorf("%s loads as\n%+v\nwant Default()\n%+v", repoConfig, c, Default())
	}
}

// exampleLine is a commented-out setting in sandboxd.toml: "#" and no space.
var exampleLine = regexp.MustCompile(`(?m)^#([^ #\n])`)

// With its examples uncommented, the repo's sandboxd.toml is still valid and
// sets every key the schema has, so none goes undocumented.
func TestRepoConfigExamples(t *testing.T) {
	data, err := os.ReadFile(repoConfig)
	if err != nil {
		t.Fatal(err)
	}
	text := exampleLine.ReplaceAllString(string(data), "$1")
	c, err := Parse([]byte(text), "sandboxd.toml, examples uncommented")
	if err != nil {
		t.Fatal(err)
	}
	want := Default()
	want.Storage.Btrfs.Root = "/srv/sandboxd"
	want.Storage.ZFS.Root = "tank/sandboxd"
	want.Metrics = Metrics{Listen: "unix:/run/sandboxd/metrics.sock", Group: "adm"}
	want.Projects = []Project{{Name: "web", Path: "/srv/web", Users: []string{"alice", "1001"}, Groups: []string{"webdev"},
		Units: []string{"nginx.service"}, Env: []string{"APP_ENV=staging", "LOG_LEVEL=debug"},
		Ignore: []string{"*.log", "/tmp/"}, Pool: ptrTo(4)}, {Name: "data", Dataset: "tank/data"}}
	// The built-in profiles, written out as they are, and one more.
	want.Profiles = builtinProfiles()
	want.Profiles["build"] = Profile{
		Network:         new(NetworkAllowlist),
		Allow:           []string{"proxy.golang.org:443", "*.githubusercontent.com:443", "10.0.0.0/8:80", "[::1]:8080"},
		ReadonlyProject: new(true),
		HiddenPaths:     []string{"/srv/secrets"},
		ReadonlyPaths:   []string{"/opt/toolchains"},
	}
	want.Stages = []Stage{
		{Name: "project", Target: "project", Checks: []string{"make test"}, CheckTimeout: Duration(10 * time.Minute), Approval: "auto"},
		{Name: "staging", Target: "/srv/staging/{project}"},
		{Name: "production", Target: "ssh://deploy@prod.example.com/srv/{project}", Approval: "admin",
			SSHOptions: []string{"-i", "/etc/sandboxd/id_ed25519", "-o", "UserKnownHostsFile=/etc/sandboxd/known_hosts"}},
	}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("got\n%+v\nwant\n%+v", c, want)
	}

	d, err := parseDoc(text)
	if err != nil {
		t.Fatal(err)
	}
	set := map[string]bool{}
	for _, k := range d.md.Keys() {
		set[schemaKey(reflect.TypeFor[Config](), k)] = true
	}
	for _, k := range leafKeys(reflect.TypeFor[Config](), nil) {
		if !set[k] {
			t.Errorf("%s does not show key %s", repoConfig, k)
		}
	}
}

// leafKeys lists the dotted keys of every value in t's schema; "*" stands
// for the name of an entry in a table of named things ("profile.*.ttl").
func leafKeys(t reflect.Type, prefix toml.Key) []string {
	t = deref(t)
	if t.Kind() == reflect.Map {
		return leafKeys(t.Elem(), append(prefix[:len(prefix):len(prefix)], "*"))
	}
	if t.Kind() != reflect.Struct || isValue(t) {
		return []string{prefix.String()}
	}
	var keys []string
	for _, name := range fieldNames(t) {
		f, _ := fieldByKey(t, name)
		keys = append(keys, leafKeys(f.Type, append(prefix[:len(prefix):len(prefix)], name))...)
	}
	return keys
}

// schemaKey writes key as leafKeys does, with "*" for names in a table of
// named things.
func schemaKey(t reflect.Type, key toml.Key) string {
	out := make(toml.Key, len(key))
	for i, name := range key {
		out[i] = name
		switch t = deref(t); t.Kind() {
		case reflect.Map:
			out[i], t = "*", t.Elem()
		case reflect.Struct:
			f, _ := fieldByKey(t, name)
			t = f.Type
		}
	}
	return out.String()
}

func TestLoadMissingFile(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "sandboxd.toml")

	// At the default path, no file means the defaults.
	c, err := load(missing, true)
	if err != nil || !reflect.DeepEqual(c, Default()) {
		t.Errorf("load(missing, optional) = %+v, %v; want Default()", c, err)
	}

	// Named explicitly, it must be there.
	_, err = Load(missing)
	if !errors.Is(err, fs.ErrNotExist) || errors.Is(err, ErrInvalid) {
		t.Errorf("Load(missing) = %v; want a not-exist error, not ErrInvalid", err)
	}
	if err != nil && !strings.Contains(err.Error(), missing) {
		t.Errorf("Load(missing) = %q; want it to name %s", err, missing)
	}
}

func TestLoadNamesFileAndLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sandboxd.toml")
	if err := os.WriteFile(path, []byte("[daemon]\nlog_levl = \"debug\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Load(path)
	want := path + ":2: unknown key daemon.log_levl"
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("Load = %v; want %q...", err, want)
	}
}

func TestParseGood(t *testing.T) {
	with := func(f func(c *Config)) *Config {
		c := Default()
		f(c)
		return c
	}
	tests := []struct {
		name, in string
		want     *Config
	}{
		{"empty", "", Default()},
		{"comments only", "# nothing\n\n", Default()},
		{"one key; the rest default", "[daemon]\nlog_level = \"debug\"\n",
			with(func(c *Config) { c.Daemon.LogLevel = "debug" })},
		{"dotted keys", "daemon.log_level = \"warn\"\nstorage.embedded.size = \"1T\"\n",
			with(func(c *Config) { c.Daemon.LogLevel = "warn"; c.Storage.Embedded.Size = TiB })},
		{"size in bytes", "[storage.embedded]\nsize = 536870912\n",
			with(func(c *Config) { c.Storage.Embedded.Size = 512 * MiB })},
		{"size exactly the least", "[storage.embedded]\nsize = \"256M\"\n",
			with(func(c *Config) { c.Storage.Embedded.Size = 256 * MiB })},
		{"embedded moved", "[storage.embedded]\nimage = \"/data/p.img\"\nmountpoint = \"/data/p\"\n",
			with(func(c *Config) { c.Storage.Embedded.Image, c.Storage.Embedded.Mountpoint = "/data/p.img", "/data/p" })},
		{"btrfs", "[storage]\nbackend = \"btrfs\"\n[storage.btrfs]\nroot = \"/srv/sandboxd\"\n",
			with(func(c *Config) { c.Storage.Backend, c.Storage.Btrfs.Root = "btrfs", "/srv/sandboxd" })},
		{"zfs", "[storage]\nbackend = \"zfs\"\n[storage.zfs]\nroot = \"tank/a/b-c_d.e:f\"\n",
			with(func(c *Config) { c.Storage.Backend, c.Storage.ZFS.Root = "zfs", "tank/a/b-c_d.e:f" })},
		{"projects", `
[[project]]
name = "web"
path = "/srv/web"

[[project]]
name = "Data_1.x"
dataset = "tank/data"
`, with(func(c *Config) {
			c.Projects = []Project{{Name: "web", Path: "/srv/web"}, {Name: "Data_1.x", Dataset: "tank/data"}}
		})},
		{"projects inline", `project = [{name = "a", path = "/a"}, {name = "b", dataset = "t/b"}]`,
			with(func(c *Config) { c.Projects = []Project{{Name: "a", Path: "/a"}, {Name: "b", Dataset: "t/b"}} })},
		{"CRLF", "[daemon]\r\nlog_level = \"error\"\r\n",
			with(func(c *Config) { c.Daemon.LogLevel = "error" })},
		{"root path", "[daemon]\nstate_dir = \"/\"\n",
			with(func(c *Config) { c.Daemon.StateDir = "/" })},
		{"audit log bounds", "[daemon]\naudit_max_size = \"1M\"\naudit_keep = 100\n",
			with(func(c *Config) { c.Daemon.AuditMaxSize, c.Daemon.AuditKeep = MiB, 100 })},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse([]byte(tt.in), "x.toml")
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(c, tt.want) {
				t.Errorf("got\n%+v\nwant\n%+v", c, tt.want)
			}
		})
	}
}

// Each bad file gives an error, wrapping ErrInvalid, whose text has every one
// of want: the file and line, the key, the bad value, what is allowed.
func TestParseBad(t *testing.T) {
	tests := []struct {
		name, in string
		want     []string
	}{
		// Unknown keys and sections.
		{"top-level key", "log_level = \"debug\"\n",
			[]string{"x.toml:1: unknown key log_level", "allowed at top level: daemon, storage, limits, access, project"}},
		{"misspelled key", "[daemon]\nstate_dir = \"/x\"\nlog_levl = \"debug\"\n",
			[]string{"x.toml:3: unknown key daemon.log_levl", "allowed in daemon: state_dir, log_level"}},
		{"misspelled nested key", "[storage]\nbackend = \"embedded\"\n\n[storage.embedded]\nsise = \"1G\"\n",
			[]string{"x.toml:5: unknown key storage.embedded.sise", "allowed in storage.embedded: image, size, mountpoint"}},
		{"misspelled dotted key", "[storage]\nembeded.size = \"1G\"\n",
			[]string{"x.toml:2: unknown key storage.embeded.size", "allowed in storage: backend, embedded, btrfs, zfs"}},
		{"key in another case", "[daemon]\nLog_Level = \"debug\"\n",
			[]string{"x.toml:2: unknown key daemon.Log_Level"}},
		{"unknown section", "[daemon]\n\n[deamon]\nlog_level = \"debug\"\n",
			[]string{"x.toml:3: unknown section [deamon]", "allowed at top level"}},
		{"unknown nested section", "[storage.embeded]\nsize = \"1G\"\n",
			[]string{"x.toml:1: unknown section [storage.embeded]"}},
		{"unknown array section", "[[projects]]\nname = \"a\"\n",
			[]string{"x.toml:1: unknown section [[projects]]"}},
		{"misspelled key in a later project", "[[project]]\nname = \"a\"\npath = \"/a\"\n[[project]]\nnmae = \"b\"\npath = \"/b\"\n[[project]]\nname = \"c\"\npath = \"/c\"\n",
			[]string{"x.toml:5: unknown key project[1].nmae", "allowed in project: name, path, dataset"}},

		// The audit log's bounds.
		{"audit log too small", "[daemon]\naudit_max_size = \"64K\"\n",
			[]string{"x.toml:2:", "daemon.audit_max_size = 64KiB is too small: at least 1MiB"}},
		{"audit log size not a size", "[daemon]\naudit_max_size = \"lots\"\n",
			[]string{"x.toml:2:", "audit_max_size"}},
		{"audit log kept alone", "[daemon]\naudit_keep = 1\n",
			[]string{"x.toml:2:", "daemon.audit_keep = 1: want 2 to 100 files"}},
		{"audit log kept too often", "[daemon]\naudit_keep = 1000\n",
			[]string{"x.toml:2:", "daemon.audit_keep = 1000: want 2 to 100"}},

		// Stages.
		{"stage without a name", "[[stage]]\ntarget = \"project\"\n",
			[]string{"x.toml:1:", "stage[0].name", "not a valid stage name"}},
		{"first stage not the project", "[[stage]]\nname = \"s\"\ntarget = \"/srv/s\"\n",
			[]string{"x.toml:3:", "the first stage must be the project"}},
		{"project stage later", "[[stage]]\nname = \"a\"\ntarget = \"project\"\n[[stage]]\nname = \"b\"\ntarget = \"project\"\n",
			[]string{"x.toml:6:", "stage[1].target", "must be the first stage"}},
		{"bad target", "[[stage]]\nname = \"a\"\ntarget = \"project\"\n[[stage]]\nname = \"b\"\ntarget = \"ftp://x/y\"\n",
			[]string{"x.toml:6:", "stage[1].target", "ssh://"}},
		{"ssh target without a path", "[[stage]]\nname = \"a\"\ntarget = \"project\"\n[[stage]]\nname = \"b\"\ntarget = \"ssh://host\"\n",
			[]string{"x.toml:6:", "stage[1].target", "no path after the host: ssh://host/absolute/path"}},
		{"duplicate stage", "[[stage]]\nname = \"a\"\ntarget = \"project\"\n[[stage]]\nname = \"a\"\ntarget = \"/srv/a\"\n",
			[]string{"x.toml:5:", "is taken by stage[0]"}},
		{"bad approval", "[[stage]]\nname = \"a\"\ntarget = \"project\"\napproval = \"maybe\"\n",
			[]string{"x.toml:4:", "stage[0].approval", "maybe"}},
		{"checks on a path stage", "[[stage]]\nname = \"a\"\ntarget = \"project\"\nchecks = [\"true\"]\n[[stage]]\nname = \"staging\"\ntarget = \"/srv/s\"\nchecks = [\"sh check.sh\"]\n",
			[]string{"x.toml:8:", "stage[1].checks", "the checks of stage staging (target /srv/s) would run outside a sandbox: not supported; put checks on the project stage"}},
		{"checks on an ssh stage", "[[stage]]\nname = \"a\"\ntarget = \"project\"\n[[stage]]\nname = \"prod\"\ntarget = \"ssh://h/srv/p\"\nchecks = [\"make smoke\"]\n",
			[]string{"stage[1].checks", "the checks of stage prod (target ssh://h/srv/p) would run outside a sandbox"}},
		{"empty check", "[[stage]]\nname = \"a\"\ntarget = \"project\"\nchecks = [\" \"]\n",
			[]string{"x.toml:4:", "empty command"}},

		// Limits.
		{"negative cap", "[limits]\nmax_sandboxes = -1\n",
			[]string{"x.toml:2: limits.max_sandboxes = -1 is negative"}},
		{"bad user-limit policy", "[limits]\non_user_limit = \"kill\"\n",
			[]string{"x.toml:2:", "limits.on_user_limit", "kill"}},
		{"bad duration", "[limits]\ndefault_ttl = \"a day\"\n",
			[]string{"x.toml:2:", "limits.default_ttl", "a day"}},
		{"negative duration", "[limits]\nmax_ttl = \"-1h\"\n",
			[]string{"x.toml:2:", "limits.max_ttl", "negative"}},
		{"duration as a number", "[limits]\ndefault_ttl = 3600\n",
			[]string{"x.toml:2:", "limits.default_ttl", "not a duration"}},
		{"default ttl over the max", "[limits]\ndefault_ttl = \"48h\"\nmax_ttl = \"24h\"\n",
			[]string{"x.toml:2: limits.default_ttl = 48h0m0s is longer than limits.max_ttl = 24h0m0s"}},

		// Types.
		{"string wanted", "[daemon]\nlog_level = 3\n",
			[]string{"x.toml:2: daemon.log_level: want a string, not an integer"}},
		{"table wanted", "daemon = \"x\"\n",
			[]string{"x.toml:1: daemon: want a table, not a string"}},
		{"wrong type in an earlier project", "[[project]]\nname = 5\npath = \"/a\"\n[[project]]\nname = \"b\"\npath = \"/b\"\n",
			[]string{"x.toml:2: project[0].name: want a string, not an integer"}},

		// Sizes.
		{"size unit", "[storage.embedded]\nsize = \"12 parsecs\"\n",
			[]string{"x.toml:2: storage.embedded.size", `"12 parsecs" is not a size`, `unit K, M, G or T`}},
		{"size negative string", "[storage.embedded]\nsize = \"-1G\"\n",
			[]string{"x.toml:2: storage.embedded.size", `"-1G" is not a size`}},
		{"size negative integer", "[storage.embedded]\nsize = -1\n",
			[]string{"x.toml:2: storage.embedded.size", "-1 is negative"}},
		{"size empty", "[storage.embedded]\nsize = \"\"\n",
			[]string{"x.toml:2: storage.embedded.size", `"" is not a size`}},
		{"size fraction", "[storage.embedded]\nsize = \"1.5G\"\n",
			[]string{"x.toml:2: storage.embedded.size", `"1.5G" is not a size`}},
		{"size float", "[storage.embedded]\nsize = 1.5\n",
			[]string{"x.toml:2: storage.embedded.size", "the float 1.5 is not a size"}},
		{"size boolean", "[storage.embedded]\nsize = true\n",
			[]string{"x.toml:2: storage.embedded.size", "the boolean true is not a size"}},
		{"size too large", "[storage.embedded]\nsize = \"16777216T\"\n",
			[]string{"x.toml:2: storage.embedded.size", `"16777216T" is too large`}},
		{"size too small", "[storage.embedded]\n\nsize = \"255M\"\n",
			[]string{`x.toml:3: storage.embedded.size = "255MiB" is too small: at least 256MiB`}},

		// Paths.
		{"relative path", "[daemon]\nstate_dir = \"var/lib/sandboxd\"\n",
			[]string{`x.toml:2: daemon.state_dir = "var/lib/sandboxd" is not absolute`, "want an absolute path"}},
		{"dot-dot in path", "[storage.embedded]\nimage = \"/var/lib/../pool.img\"\n",
			[]string{`x.toml:2: storage.embedded.image = "/var/lib/../pool.img" has a ".." element`}},
		{"unclean path", "[storage.embedded]\nmountpoint = \"/var//pool/\"\n",
			[]string{`x.toml:2: storage.embedded.mountpoint = "/var//pool/" is not clean ("/var/pool" is)`}},
		{"empty path", "[daemon]\nstate_dir = \"\"\n",
			[]string{`x.toml:2: daemon.state_dir = "" is empty`}},
		{"relative btrfs root", "[storage]\nbackend = \"btrfs\"\n[storage.btrfs]\nroot = \"srv\"\n",
			[]string{`x.toml:4: storage.btrfs.root = "srv" is not absolute`}},
		{"relative project path", "[[project]]\nname = \"a\"\npath = \"/a\"\n[[project]]\nname = \"b\"\npath = \"b/../c\"\n",
			[]string{`x.toml:6: project[1].path = "b/../c" is not absolute`}},

		// Projects.
		{"duplicate project name", "[[project]]\nname = \"web\"\npath = \"/a\"\n\n[[project]]\nname = \"db\"\npath = \"/b\"\n\n[[project]]\nname = \"web\"\npath = \"/c\"\n",
			[]string{`x.toml:10: project[2].name = "web" is taken: project[0] at line 2 has that name`}},
		{"path and dataset", "[[project]]\nname = \"web\"\npath = \"/a\"\ndataset = \"tank/a\"\n",
			[]string{`x.toml:1: project[0] ("web") has both path = "/a" and dataset = "tank/a": give exactly one`}},
		{"neither path nor dataset", "[[project]]\nname = \"a\"\npath = \"/a\"\n[[project]]\nname = \"web\"\n",
			[]string{`x.toml:4: project[1] ("web") has neither path nor dataset: give exactly one`}},
		{"name with ..", "[[project]]\nname = \"../x\"\npath = \"/a\"\n",
			[]string{`x.toml:2: project[0].name = "../x" is not a valid name: use letters, digits`}},
		{"name with /", "[[project]]\nname = \"a/b\"\npath = \"/a\"\n",
			[]string{`x.toml:2: project[0].name = "a/b" is not a valid name`}},
		{"name empty", "[[project]]\nname = \"\"\npath = \"/a\"\n",
			[]string{`x.toml:2: project[0].name is missing or empty`}},
		{"name missing", "\n[[project]]\npath = \"/a\"\n",
			[]string{`x.toml:2: project[0].name is missing or empty`}},
		{"name with NUL", "[[project]]\nname = \"a\\u0000b\"\npath = \"/a\"\n",
			[]string{`x.toml:2: project[0].name = "a\x00b" is not a valid name`}},
		{"name too long", "[[project]]\nname = \"" + strings.Repeat("a", 101) + "\"\npath = \"/a\"\n",
			[]string{`x.toml:2: project[0].name`, "at most 100 bytes"}},

		// Datasets.
		{"dataset is a pool", "[[project]]\nname = \"a\"\ndataset = \"tank\"\n",
			[]string{`x.toml:3: project[0].dataset = "tank" names a whole pool`, `want pool/child`}},
		{"dataset leading /", "[[project]]\nname = \"a\"\ndataset = \"/tank/a\"\n",
			[]string{`x.toml:3: project[0].dataset = "/tank/a" starts or ends with "/"`}},
		{"dataset trailing /", "[[project]]\nname = \"a\"\ndataset = \"tank/a/\"\n",
			[]string{`project[0].dataset = "tank/a/" starts or ends with "/"`}},
		{"dataset //", "[storage.zfs]\nroot = \"tank//a\"\n",
			[]string{`x.toml:2: storage.zfs.root = "tank//a" has an empty component`}},
		{"dataset @", "[storage.zfs]\nroot = \"tank/a@snap\"\n",
			[]string{`x.toml:2: storage.zfs.root = "tank/a@snap" has an "@"`}},
		{"dataset ..", "[storage.zfs]\nroot = \"tank/../a\"\n",
			[]string{`x.toml:2: storage.zfs.root = "tank/../a" has a ".." component`}},
		{"dataset space", "[storage.zfs]\nroot = \"tank/a b\"\n",
			[]string{`x.toml:2: storage.zfs.root = "tank/a b" holds ' '`}},
		{"dataset pool digit", "[storage.zfs]\nroot = \"1tank/a\"\n",
			[]string{`x.toml:2: storage.zfs.root = "1tank/a" has a pool name that does not start with a letter`}},

		// Choices.
		{"bad backend", "[storage]\nbackend = \"ext4\"\n",
			[]string{`x.toml:2: storage.backend = "ext4" is not allowed: use embedded, btrfs, zfs`}},
		{"bad log level", "[daemon]\nlog_level = \"loud\"\n",
			[]string{`x.toml:2: daemon.log_level = "loud" is not allowed: use debug, info, warn, error`}},
		{"btrfs without root", "[storage]\nbackend = \"btrfs\"\n",
			[]string{`x.toml:2: storage.btrfs.root is required with storage.backend = "btrfs"`}},
		{"zfs without root", "[storage]\nbackend = \"zfs\"\n",
			[]string{`x.toml:2: storage.zfs.root is required with storage.backend = "zfs"`}},

		// Syntax.
		{"bare word", "[daemon]\nlog_level = info\n",
			[]string{"x.toml:2: "}},
		{"unterminated string", "[daemon]\nstate_dir = \"/x\nlog_level = \"info\"\n",
			[]string{"x.toml:2: strings cannot contain newlines"}},
		{"key twice", "[daemon]\nlog_level = \"info\"\nlog_level = \"warn\"\n",
			[]string{"x.toml:3: ", "daemon.log_level", "already been defined"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { wantParseError(t, tt.in, tt.want) })
	}
}

// All problems are reported at once, in the order of the file.
func TestParseReportsAllInOrder(t *testing.T) {
	in := `[daemon]
log_level = "loud"

[[project]]
name = "a"
path = "a"

[storage]
backend = "ext4"
`
	_, err := Parse([]byte(in), "x.toml")
	want := `x.toml:2: daemon.log_level = "loud" is not allowed: use debug, info, warn, error
x.toml:6: project[0].path = "a" is not absolute: want an absolute path with no ".", ".." or empty elements
x.toml:9: storage.backend = "ext4" is not allowed: use embedded, btrfs, zfs`
	if err == nil || err.Error() != want {
		t.Errorf("got\n%v\nwant\n%s", err, want)
	}
}

func TestErrorsCarryTheirCause(t *testing.T) {
	_, err := Parse([]byte("[[project]]\nname = \"../x\"\npath = \"/x\"\n"), "x.toml")
	if !errors.Is(err, cowfs.ErrInvalidName) {
		t.Errorf("bad project name: %v does not wrap cowfs.ErrInvalidName", err)
	}
	var e *Error
	if !errors.As(err, &e) || e.Key != "project[0].name" || e.Line != 2 || e.File != "x.toml" {
		t.Errorf("bad project name: got %#v; want Key project[0].name at x.toml line 2", e)
	}

	_, err = Parse([]byte("[daemon\n"), "x.toml")
	var pe toml.ParseError
	if !errors.As(err, &pe) || !errors.Is(err, ErrInvalid) {
		t.Errorf("syntax error %v: want a toml.ParseError and ErrInvalid", err)
	}
}

// Validate works on a Config made in code, where there are no lines to name.
func TestValidateWithoutFile(t *testing.T) {
	if err := Default().Validate(); err != nil {
		t.Fatalf("Default() is invalid: %v", err)
	}
	c := Default()
	c.Storage.Backend = "zfs"
	c.Projects = []Project{{Name: "a", Path: "/a"}, {Name: "a", Dataset: "tank/a"}}
	err := c.Validate()
	want := `storage.zfs.root is required with storage.backend = "zfs": a dataset of an existing pool, like "tank/sandboxd"
project[1].name = "a" is taken: project[0] has that name; each project needs its own`
	if err == nil || err.Error() != want {
		t.Errorf("got\n%v\nwant\n%s", err, want)
	}
	if !errors.Is(err, ErrInvalid) {
		t.Errorf("%v does not wrap ErrInvalid", err)
	}
}

func TestDefaultStorageOpensTheEmbeddedPool(t *testing.T) {
	got := Default().Storage.Pool()
	want := pool.Config{
		Backend:    pool.Embedded,
		Image:      "/var/lib/sandboxd/pool.img",
		Size:       20 << 30,
		Mountpoint: "/var/lib/sandboxd/pool",
	}
	if got != want {
		t.Fatalf("Default().Storage.Pool() = %+v; want %+v", got, want)
	}
}

// wantParseError parses in and wants an error wrapping ErrInvalid that
// says each of want.
func wantParseError(t *testing.T, in string, want []string) {
	t.Helper()
	_, err := Parse([]byte(in), "x.toml")
	if err == nil {
		t.Fatalf("no error; want %q", want)
	}
	if !errors.Is(err, ErrInvalid) {
		t.Errorf("%v: does not wrap ErrInvalid", err)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error\n%v\ndoes not say %q", err, w)
		}
	}
}

func ptrTo[T any](v T) *T { return &v }
