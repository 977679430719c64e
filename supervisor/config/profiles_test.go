package config

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/cowfs"
)

func TestSandboxDefaults(t *testing.T) {
	c := Default()
	want := Sandbox{
		HiddenPaths: []string{"/root", "/home", "/var/lib/sandboxd", "/var/log/sandboxd",
			"/etc/sandboxd", "/etc/shadow", "/etc/gshadow", "/etc/ssh",
			"/etc/shadow-", "/etc/gshadow-", "/etc/security/opasswd", "/etc/sudoers", "/etc/sudoers.d",
			"/etc/ssl/private", "/etc/krb5.keytab", "/var/backups", "/var/lib/sudo"},
		ReadonlyPaths:  []string{},
		DefaultProfile: "default",
		UserNS:         "auto",
		RootLayers:     []string{"/"},
		UserNSFirstID:  DefaultUserNSFirstID,
		UserNSIDCount:  DefaultUserNSIDCount,
	}
	if !reflect.DeepEqual(c.Sandbox, want) {
		t.Errorf("Default().Sandbox = %+v; want %+v", c.Sandbox, want)
	}
	if c.Profiles != nil {
		t.Errorf("Default().Profiles = %v; want none (the built-ins are not in it)", c.Profiles)
	}
	if _, ok := c.Profile(c.Sandbox.DefaultProfile); !ok {
		t.Errorf("the default profile %q does not exist", c.Sandbox.DefaultProfile)
	}
}

func TestBuiltinProfiles(t *testing.T) {
	c := Default()
	if got, want := c.ProfileNames(), []string{"default", "trusted", "untrusted"}; !slices.Equal(got, want) {
		t.Errorf("ProfileNames() = %q; want %q", got, want)
	}
	tests := []struct {
		name string
		want Profile
	}{
		{"default", Profile{Network: new("none")}},
		{"trusted", Profile{Network: new("host")}},
		{"untrusted", Profile{
			Network:    new("none"),
			MemoryMax:  new(512 * MiB),
			TasksMax:   new(256),
			CPUQuota:   new(CPUQuota(100)),
			DiskQuota:  new(GiB),
			TTL:        new(Duration(time.Hour)),
			RuntimeMax: new(Duration(time.Hour)),
		}},
	}
	for _, tt := range tests {
		got, ok := c.Profile(tt.name)
		if !ok || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("Profile(%q) = %+v, %v; want %+v", tt.name, got, ok, tt.want)
		}
	}
	if p, ok := c.Profile("nonesuch"); ok || !reflect.DeepEqual(p, Profile{}) {
		t.Errorf("Profile(nonesuch) = %+v, %v; want none", p, ok)
	}

	// What Profile returns is a copy.
	p, _ := c.Profile("untrusted")
	*p.MemoryMax, *p.Network = 1, "host"
	if q, _ := c.Profile("untrusted"); *q.MemoryMax != 512*MiB || q.NetworkMode() != NetworkNone {
		t.Errorf("changing a Profile's values changed the config: %+v", q)
	}
}

func TestFileProfiles(t *testing.T) {
	in := `
[sandbox]
hidden_paths = ["/secret"]
readonly_paths = ["/opt", "/usr/local"]
default_profile = "ci"

[profile.untrusted]
memory_max = "1G"

[profile.ci]
network = "allowlist"
allow = ["example.com:443", "*.example.com:*", "10.0.0.0/8:80", "[::1]:8080"]
tasks_max = 0x10
cpu_quota = "250%"
hidden_paths = ["/srv/keys", "/secret"]
readonly_paths = ["/srv/data"]

[profile."v1.2"]
network = "host"
`
	c, err := Parse([]byte(in), "x.toml")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.ProfileNames(), []string{"ci", "default", "trusted", "untrusted", "v1.2"}; !slices.Equal(got, want) {
		t.Errorf("ProfileNames() = %q; want %q", got, want)
	}
	// The file's untrusted replaces the built-in whole: what it leaves out
	// is not set.
	if p, _ := c.Profile("untrusted"); !reflect.DeepEqual(p, Profile{MemoryMax: new(GiB)}) {
		t.Errorf("Profile(untrusted) = %+v; want only memory_max 1GiB", p)
	}
	ci, ok := c.Profile("ci")
	want := Profile{
		Network:       new("allowlist"),
		Allow:         []string{"example.com:443", "*.example.com:*", "10.0.0.0/8:80", "[::1]:8080"},
		TasksMax:      new(16),
		CPUQuota:      new(CPUQuota(250)),
		HiddenPaths:   []string{"/srv/keys", "/secret"},
		ReadonlyPaths: []string{"/srv/data"},
	}
	if !ok || !reflect.DeepEqual(ci, want) {
		t.Errorf("Profile(ci) = %+v, %v; want %+v", ci, ok, want)
	}
	if got := ci.CPUQuota.Percent(); got != 250 {
		t.Errorf("cpu_quota 250%%: Percent() = %d", got)
	}
	if got := ci.CPUQuota.PerSecUSec(); got != 2_500_000 {
		t.Errorf("cpu_quota 250%%: PerSecUSec() = %d; want 2500000", got)
	}
	if got, want := c.HiddenPaths(ci), []string{"/secret", "/srv/keys"}; !slices.Equal(got, want) {
		t.Errorf("HiddenPaths(ci) = %q; want %q", got, want)
	}
	if got, want := c.ReadonlyPaths(ci), []string{"/opt", "/usr/local", "/srv/data"}; !slices.Equal(got, want) {
		t.Errorf("ReadonlyPaths(ci) = %q; want %q", got, want)
	}
	if p, ok := c.Profile("v1.2"); !ok || p.NetworkMode() != NetworkHost {
		t.Errorf(`Profile("v1.2") = %+v, %v; want network host`, p, ok)
	}
	if p, _ := c.Profile("trusted"); p.NetworkMode() != NetworkHost {
		t.Errorf("the built-in trusted is gone: %+v", p)
	}
}

// A key a profile does not set is nil; one set to a zero value is not.
func TestProfileUnsetIsNotZero(t *testing.T) {
	in := `
[profile.unset]

[profile.zero]
network = "none"
allow = []
memory_max = 0
disk_quota = "0"
ttl = "0"
runtime_max = "0s"
readonly_project = false
hidden_paths = []
readonly_paths = []
`
	c, err := Parse([]byte(in), "x.toml")
	if err != nil {
		t.Fatal(err)
	}
	unset, _ := c.Profile("unset")
	if !reflect.DeepEqual(unset, Profile{}) {
		t.Errorf("profile unset = %+v; want every field nil", unset)
	}
	if unset.NetworkMode() != NetworkNone {
		t.Errorf("profile unset: NetworkMode() = %q; want none", unset.NetworkMode())
	}
	zero, _ := c.Profile("zero")
	want := Profile{
		Network:         new("none"),
		Allow:           []string{},
		MemoryMax:       new(Size(0)),
		DiskQuota:       new(Size(0)),
		TTL:             new(Duration(0)),
		RuntimeMax:      new(Duration(0)),
		ReadonlyProject: new(false),
		HiddenPaths:     []string{},
		ReadonlyPaths:   []string{},
	}
	if !reflect.DeepEqual(zero, want) {
		t.Errorf("profile zero = %+v; want %+v", zero, want)
	}
	if zero.ReadonlyProject == nil || *zero.ReadonlyProject {
		t.Errorf("readonly_project = false: got %v; want set, to false", zero.ReadonlyProject)
	}
}

func TestParseBadSandbox(t *testing.T) {
	tests := []struct {
		name, in string
		want     []string
	}{
		// [sandbox].
		{"relative hidden path", "[sandbox]\nhidden_paths = [\"/root\", \"home\"]\n",
			[]string{`x.toml:2: sandbox.hidden_paths holds "home", which is not absolute: want absolute paths with no ".", ".." or empty elements, other than "/"`}},
		{"root hidden", "[sandbox]\n\nhidden_paths = [\"/\"]\n",
			[]string{`x.toml:3: sandbox.hidden_paths holds "/", which is the whole host`}},
		{"root read-only", "[sandbox]\nreadonly_paths = [\"/\"]\n",
			[]string{`x.toml:2: sandbox.readonly_paths holds "/", which is the whole host`}},
		{"unclean read-only path", "[sandbox]\nreadonly_paths = [\"/opt/\"]\n",
			[]string{`x.toml:2: sandbox.readonly_paths holds "/opt/", which is not clean ("/opt" is)`}},
		{"dot-dot hidden path", "[sandbox]\nhidden_paths = [\"/a/../etc\"]\n",
			[]string{`x.toml:2: sandbox.hidden_paths holds "/a/../etc", which has a ".." element`}},
		{"empty hidden path", "[sandbox]\nhidden_paths = [\"\"]\n",
			[]string{`x.toml:2: sandbox.hidden_paths holds "", which is empty`}},
		{"duplicate hidden path", "[sandbox]\nhidden_paths = [\n  \"/root\",\n  \"/srv\",\n  \"/root\",\n]\n",
			[]string{`x.toml:2: sandbox.hidden_paths holds "/root" twice: list each path once`}},
		{"hidden and read-only", "[sandbox]\nhidden_paths = [\"/srv\"]\nreadonly_paths = [\"/srv\"]\n",
			[]string{`x.toml:3: sandbox.readonly_paths holds "/srv", as sandbox.hidden_paths does: a path is hidden or read-only, not both`}},
		{"missing default profile", "[profile.ci]\n[sandbox]\ndefault_profile = \"fast\"\n",
			[]string{`x.toml:3: sandbox.default_profile = "fast" names no profile: use one of ci, default, trusted, untrusted, or add [profile.fast]`}},
		{"empty default profile", "[sandbox]\ndefault_profile = \"\"\n",
			[]string{`x.toml:2: sandbox.default_profile = "" names no profile`}},
		{"hidden paths not an array", "[sandbox]\nhidden_paths = \"/root\"\n",
			[]string{`x.toml:2: sandbox.hidden_paths: want an array, not a string`}},
		{"unknown sandbox key", "[sandbox]\nhiden_paths = []\n",
			[]string{`x.toml:2: unknown key sandbox.hiden_paths (allowed in sandbox: hidden_paths, readonly_paths, default_profile, userns, root_layers, userns_first_id, userns_id_count)`}},

		// Networks.
		{"allowlist without allow", "[profile.ci]\nnetwork = \"allowlist\"\n",
			[]string{`x.toml:2: profile.ci.network = "allowlist" needs profile.ci.allow: a non-empty list of destinations like "example.com:443"`}},
		{"allowlist with empty allow", "[profile.ci]\nnetwork = \"allowlist\"\nallow = []\n",
			[]string{`x.toml:3: profile.ci.network = "allowlist" needs profile.ci.allow`}},
		{"allow with network none", "[profile.ci]\nnetwork = \"none\"\nallow = [\"example.com:443\"]\n",
			[]string{`x.toml:3: profile.ci.allow is set, but profile.ci.network is "none": allow is only for network = "allowlist"`}},
		{"allow without network", "[profile.ci]\nallow = [\"example.com:443\"]\n",
			[]string{`x.toml:2: profile.ci.allow is set, but profile.ci.network is "none"`}},
		{"allow with network host", "[profile.ci]\nnetwork = \"host\"\nallow = [\"example.com:443\"]\n",
			[]string{`x.toml:3: profile.ci.allow is set, but profile.ci.network is "host"`}},
		{"allow entry without port", "[profile.ci]\nnetwork = \"allowlist\"\nallow = [\"example.com:443\", \"example.org\"]\n",
			[]string{`x.toml:3: profile.ci.allow holds "example.org": want host:port entries like "example.com:443", "*.example.com:*", "10.0.0.0/8:80" or "[::1]:8080"`}},
		{"allow entry empty", "[profile.ci]\nnetwork = \"allowlist\"\nallow = [\"\"]\n",
			[]string{`x.toml:3: profile.ci.allow holds "": want host:port entries`}},
		{"allow entry not a string", "[profile.ci]\nnetwork = \"allowlist\"\nallow = [443]\n",
			[]string{`x.toml:3: profile.ci.allow: want a string, not an integer`}},
		{"unknown network", "[profile.ci]\nnetwork = \"bridge\"\n",
			[]string{`x.toml:2: profile.ci.network = "bridge" is not allowed: use none, allowlist, host`}},

		// Limits.
		{"cpu quota without %", "[profile.ci]\ncpu_quota = \"50\"\n",
			[]string{`x.toml:2: profile.ci.cpu_quota: "50" is not a CPU quota: want a whole percentage of one CPU, more than 0, like "50%" or "200%"`}},
		{"cpu quota 0%", "[profile.ci]\ncpu_quota = \"0%\"\n",
			[]string{`x.toml:2: profile.ci.cpu_quota: "0%" is no CPU at all: want a whole percentage`}},
		{"cpu quota abc%", "[profile.ci]\ncpu_quota = \"abc%\"\n",
			[]string{`x.toml:2: profile.ci.cpu_quota: "abc%" is not a CPU quota`}},
		{"cpu quota fraction", "[profile.ci]\ncpu_quota = \"12.5%\"\n",
			[]string{`x.toml:2: profile.ci.cpu_quota: "12.5%" is not a CPU quota`}},
		{"cpu quota negative", "[profile.ci]\ncpu_quota = \"-50%\"\n",
			[]string{`x.toml:2: profile.ci.cpu_quota: "-50%" is not a CPU quota`}},
		{"cpu quota huge", "[profile.ci]\ncpu_quota = \"99999999999%\"\n",
			[]string{`x.toml:2: profile.ci.cpu_quota: "99999999999%" is too large`}},
		{"cpu quota integer", "[profile.ci]\ncpu_quota = 50\n",
			[]string{`x.toml:2: profile.ci.cpu_quota: the integer 50 is not a CPU quota`}},
		{"tasks max 0", "[profile.ci]\ntasks_max = 0\n",
			[]string{`x.toml:2: profile.ci.tasks_max = 0 is too small: want 1 or more`}},
		{"tasks max a string", "[profile.ci]\ntasks_max = \"256\"\n",
			[]string{`x.toml:2: profile.ci.tasks_max: want an integer, not a string`}},
		{"memory max below the floor", "[profile.ci]\nmemory_max = \"12\"\n",
			[]string{`x.toml:2: profile.ci.memory_max = 12 is too small: a sandbox's init and a shell need at least 16MiB`}},
		{"memory max not a size", "[profile.ci]\nmemory_max = \"lots\"\n",
			[]string{`x.toml:2: profile.ci.memory_max: "lots" is not a size`}},
		{"ttl not a duration", "[profile.ci]\nttl = \"an hour\"\n",
			[]string{`x.toml:2: profile.ci.ttl: "an hour": want a duration like "30m" or "24h"`}},
		{"readonly project a string", "[profile.ci]\nreadonly_project = \"yes\"\n",
			[]string{`x.toml:2: profile.ci.readonly_project: want a boolean, not a string`}},
		{"bad value in a quoted profile name", "[profile.\"v1.2\"]\n\ncpu_quota = \"50\"\n",
			[]string{`x.toml:3: profile."v1.2".cpu_quota: "50" is not a CPU quota`}},

		// Paths.
		{"relative profile hidden path", "[profile.ci]\nhidden_paths = [\"srv\"]\n",
			[]string{`x.toml:2: profile.ci.hidden_paths holds "srv", which is not absolute`}},
		{"root profile read-only path", "[profile.ci]\nreadonly_paths = [\"/\"]\n",
			[]string{`x.toml:2: profile.ci.readonly_paths holds "/", which is the whole host`}},
		{"duplicate profile read-only path", "[profile.ci]\nreadonly_paths = [\"/a\", \"/a\"]\n",
			[]string{`x.toml:2: profile.ci.readonly_paths holds "/a" twice`}},

		// Names and keys.
		{"bad profile name", "[profile.\"../x\"]\nnetwork = \"host\"\n",
			[]string{`x.toml:1: [profile."../x"]: "../x" is not a valid profile name: use letters, digits, '-', '_' and '.', not starting with '.' or '-', at most 100 bytes`}},
		{"profile name starting with -", "[profile.-x]\n",
			[]string{`x.toml:1: [profile.-x]: "-x" is not a valid profile name`}},
		{"empty profile name", "[profile.\"\"]\n",
			[]string{`x.toml:1: [profile.""]: "" is not a valid profile name`}},
		{"profile name too long", "[profile." + strings.Repeat("p", 101) + "]\n",
			[]string{`x.toml:1: [profile.ppp`, "is not a valid profile name", "at most 100 bytes"}},
		{"unknown profile key", "[profile.ci]\nnetwork = \"host\"\nmemory = \"1G\"\n",
			[]string{`x.toml:3: unknown key profile.ci.memory (allowed in profile.ci: network, allow, memory_max, tasks_max, cpu_quota, runtime_max, disk_quota, ttl, readonly_project, hidden_paths, readonly_paths)`}},
		{"profile key in another case", "[profile.ci]\nNetwork = \"host\"\n",
			[]string{`x.toml:2: unknown key profile.ci.Network`}},
		{"profile not a table", "[profile]\nnetwork = \"host\"\n",
			[]string{`x.toml:2: profile.network: want a table, not a string`}},
		{"profiles not a table", "profile = 5\n",
			[]string{`x.toml:1: profile: want a table, not an integer`}},
		{"profiles an array of tables", "[sandbox]\n[[profile]]\nnetwork = \"host\"\n",
			[]string{`x.toml:2: profile: want a table, not an array of tables`}},
		{"profiles an array", "profile = [{network = \"host\"}]\n",
			[]string{`x.toml:1: profile: want a table, not an array`}},
		{"top level lists the new sections", "sandbox_dir = \"/x\"\n",
			[]string{`allowed at top level: daemon, storage, limits, access, project, sandbox, profile`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { wantParseError(t, tt.in, tt.want) })
	}
}

func TestProfileErrorsCarryTheirCause(t *testing.T) {
	_, err := Parse([]byte("[profile.\"a/b\"]\n"), "x.toml")
	if !errors.Is(err, cowfs.ErrInvalidName) {
		t.Errorf("bad profile name: %v does not wrap cowfs.ErrInvalidName", err)
	}
	var e *Error
	if !errors.As(err, &e) || e.Key != `profile."a/b"` || e.Line != 1 {
		t.Errorf("bad profile name: got %#v; want Key profile.\"a/b\" at line 1", e)
	}

	_, err = Parse([]byte("[profile.ci]\ncpu_quota = \"50\"\n"), "x.toml")
	e = nil
	if !errors.As(err, &e) || e.Key != "profile.ci.cpu_quota" || e.Line != 2 {
		t.Errorf("bad cpu_quota: got %v (%#v); want Key profile.ci.cpu_quota at line 2", err, e)
	}
}

// Profiles made in code are checked too, in the order of their names.
func TestValidateProfilesWithoutFile(t *testing.T) {
	c := Default()
	c.Sandbox.DefaultProfile = "missing"
	c.Profiles = map[string]Profile{
		"b":       {Network: new("allowlist")},
		"a":       {TasksMax: new(0), HiddenPaths: []string{"rel"}},
		"default": {Allow: []string{"x:1"}},
	}
	err := c.Validate()
	want := `sandbox.default_profile = "missing" names no profile: use one of a, b, default, trusted, untrusted, or add [profile.missing]
profile.a.tasks_max = 0 is too small: want 1 or more
profile.a.hidden_paths holds "rel", which is not absolute: want absolute paths with no ".", ".." or empty elements, other than "/"
profile.b.network = "allowlist" needs profile.b.allow: a non-empty list of destinations like "example.com:443"
profile.default.allow is set, but profile.default.network is "none": allow is only for network = "allowlist"`
	if err == nil || err.Error() != want {
		t.Errorf("got\n%v\nwant\n%s", err, want)
	}
}
