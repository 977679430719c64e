package integration

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/tests/testbed"
)

// envTestFile is the EnvironmentFile of the host service envtest, with
// systemd.exec(5)'s quoting rules at work.
const envTestFile = `# the service's settings
FILE_PLAIN=from-file
  FILE_QUOTED = "two words \"quoted\" \$X"
FILE_SINGLE='$HOME stays'
FILE_JOINED=one\
two
OVER_BY_FILE=file
OVER_BY_TOML=file
not-a-name=dropped
`

// hostService starts a transient service on the testbed's host, with
// Environment= and EnvironmentFile=, and stops it at the test's end.
func hostService(t *testing.T, unit string, props ...string) {
	t.Helper()
	argv := append([]string{"systemd-run", "--unit=" + unit, "--quiet"}, props...)
	testbed.MustRun(t, append(argv, "sleep", "600")...)
	t.Cleanup(func() {
		_ = exec.Command("systemctl", "stop", unit).Run()
		_ = exec.Command("systemctl", "reset-failed", unit).Run()
	})
}

// envOf runs env in sandbox id with the extra sandboxctl exec arguments,
// and returns its variables.
func envOf(t *testing.T, id string, args ...string) map[string]string {
	t.Helper()
	out := ok(t, append(append([]string{"exec"}, args...), id, "--", "env")...)
	vars := map[string]string{}
	for _, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		k, v, _ := strings.Cut(line, "=")
		vars[k] = v
	}
	return vars
}

func wantVars(t *testing.T, what string, got, want map[string]string) {
	t.Helper()
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s: %s=%q (set: %v); want %q", what, k, g, ok, v)
		}
	}
}

// A project that names a host service gives its sandboxes the service's
// environment (Environment=, then EnvironmentFile= as systemd reads it),
// its own env entries over that, and a caller's --env over both; it is
// read when a sandbox is made, so that each sandbox keeps what it began
// with.
func TestProjectEnvironmentFromAHostService(t *testing.T) {
	install(t)
	const file = "/run/envtest.env"
	if err := os.WriteFile(file, []byte(envTestFile), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(file) })
	hostService(t, "envtest", "--property=Environment=A=1 OVER_BY_FILE=unit OVER_BY_TOML=unit FROM_UNIT=unit",
		"--property=EnvironmentFile="+file)
	reconfigure(t, `units = ["envtest.service"]
env = [
  "OVER_BY_TOML=toml",
  "FROM_TOML=toml",
  "OVER_BY_CALLER=toml",
]
`)
	id := strings.TrimSpace(ok(t, "create", "--quiet", "web"))
	t.Cleanup(func() { ctl(t, "", "destroy", id) })

	got := envOf(t, id)
	wantVars(t, "env in a sandbox of web", got, map[string]string{
		"A": "1", "FROM_UNIT": "unit",
		"FILE_PLAIN": "from-file", "FILE_QUOTED": `two words "quoted" $X`, "FILE_SINGLE": "$HOME stays", "FILE_JOINED": "onetwo",
		"OVER_BY_FILE": "file", "OVER_BY_TOML": "toml", "FROM_TOML": "toml", "OVER_BY_CALLER": "toml",
		"SANDBOX_ID": id, "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
	})
	if _, ok := got["not-a-name"]; ok {
		t.Errorf("env in a sandbox of web holds not-a-name, which systemd drops: %v", got)
	}

	got = envOf(t, id, "--env", "OVER_BY_CALLER=caller", "--env", "A=caller")
	wantVars(t, "env --env OVER_BY_CALLER=caller --env A=caller", got, map[string]string{
		"OVER_BY_CALLER": "caller", "A": "caller", "OVER_BY_TOML": "toml", "FILE_PLAIN": "from-file",
	})

	// The file changes on the host: the sandbox keeps what it was made
	// with; a new one gets the change.
	if err := os.WriteFile(file, []byte("FILE_PLAIN=changed\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	wantVars(t, "env after the file changed", envOf(t, id), map[string]string{"FILE_PLAIN": "from-file"})
	second := strings.TrimSpace(ok(t, "create", "--quiet", "web"))
	t.Cleanup(func() { ctl(t, "", "destroy", second) })
	wantVars(t, "env in a sandbox made after the file changed", envOf(t, second), map[string]string{"FILE_PLAIN": "changed", "A": "1"})
}

// A unit that does not exist, or whose EnvironmentFile (without "-") is
// missing, fails the create, naming the unit (and the file).
func TestProjectEnvironmentThatCannotBeReadFailsTheCreate(t *testing.T) {
	install(t)
	missing := "/run/envtest-missing.env"
	// systemd does not start it either: the unit stays, failed.
	_ = exec.Command("systemd-run", "--unit=envtest-nofile", "--quiet", "--property=EnvironmentFile="+missing, "true").Run()
	t.Cleanup(func() { _ = exec.Command("systemctl", "reset-failed", "envtest-nofile.service").Run() })

	before := listedIDs(t)
	reconfigure(t, `units = ["envtest-nosuch.service"]`+"\n")
	fails(t, 1, `creating a sandbox of web: the environment of unit envtest-nosuch.service, which project web names in sandboxd.toml: .*no such unit`, "create", "web")

	reconfigure(t, `units = ["envtest-nofile.service"]`+"\n")
	fails(t, 1, `the environment of unit envtest-nofile\.service.*EnvironmentFile=`+missing+`.*no such file or directory`, "create", "web")
	if after := listedIDs(t); len(after) != len(before) {
		t.Errorf("refused creates left sandboxes: %q before, %q after", before, after)
	}
}

// A bad env entry is a configuration error: the daemon does not start,
// and its journal names the file, the line and the entry.
func TestProjectEnvironmentBadEntryIsAConfigError(t *testing.T) {
	tb := install(t)
	base := baseConfig(tb)
	bad := base + "env = [\n  \"GOOD=1\",\n  \"BAD-NAME=1\",\n]\n"
	line := strings.Count(base, "\n") + 3
	restore := func() {
		if err := os.WriteFile("/etc/sandboxd/sandboxd.toml", []byte(base), 0o644); err != nil {
			t.Fatal(err)
		}
		testbed.MustRun(t, "systemctl", "reset-failed", "sandboxd.service")
		testbed.MustRun(t, "systemctl", "restart", "sandboxd.service")
	}
	t.Cleanup(restore)
	if err := os.WriteFile("/etc/sandboxd/sandboxd.toml", []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	testbed.MustRun(t, "systemctl", "reset-failed", "sandboxd.service")
	if err := exec.Command("systemctl", "restart", "sandboxd.service").Run(); err == nil {
		t.Fatalf("sandboxd started with env entry BAD-NAME=1")
	}
	journal := testbed.MustRun(t, "journalctl", "-u", "sandboxd.service", "-n", "50", "--no-pager")
	want := fmt.Sprintf(`/etc/sandboxd/sandboxd.toml:%d: project[0].env holds "BAD-NAME=1": want KEY=value entries`, line)
	if !strings.Contains(journal, want) {
		t.Fatalf("the journal does not say %q:\n%s", want, journal)
	}
}
