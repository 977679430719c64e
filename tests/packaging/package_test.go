// Package packaging installs the real .deb in the testbed's private
// systemd, as a sysadmin would, and uses it: D-Bus activation, a user of
// the sandboxd group, an upgrade that keeps a sandbox and the edited
// configuration, removal and purge. The .rpm is read with rpm(8).
package packaging

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/tests/testbed"
)

// The two versions built: an install, then an upgrade to a rebuild.
var versions = []string{"1.0.0", "1.0.1"}

// pkgDir holds each version's build; it is inside the repository, which
// the testbed shows at the same path.
var pkgDir string

func TestMain(m *testing.M) {
	wd, _ := os.Getwd()
	root := filepath.Dir(filepath.Dir(wd)) // tests/packaging -> repository
	pkgDir = filepath.Join(root, "bin", "test", "pkg")
	if !testbed.Inside() {
		for _, v := range versions {
			dir := filepath.Join(pkgDir, v)
			// The Makefile's own targets, into a directory of this test's.
			build := exec.Command("make", "--no-print-directory", "deb", "rpm",
				"BIN="+filepath.Join(dir, "bin"), "DIST="+dir, "VERSION="+v, "PKG_VERSION="+v)
			build.Dir = root
			if out, err := build.CombinedOutput(); err != nil {
				fmt.Fprintf(os.Stderr, "building the packages of %s: %v\n%s", v, err, out)
				os.Exit(2)
			}
		}
	}
	testbed.Main(m)
}

func deb(v string) string {
	m, _ := filepath.Glob(filepath.Join(pkgDir, v, "sandboxd_"+v+"_*.deb"))
	if len(m) != 1 {
		panic(fmt.Sprintf("the .deb of %s: %v", v, m))
	}
	return m[0]
}

func rpmFile(v string) string {
	m, _ := filepath.Glob(filepath.Join(pkgDir, v, "sandboxd-"+v+"-*.rpm"))
	if len(m) != 1 {
		panic(fmt.Sprintf("the .rpm of %s: %v", v, m))
	}
	return m[0]
}

// sh runs a shell script in the testbed, and returns its output and exit
// status.
func sh(t *testing.T, script string) (string, int) {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", script)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return out.String(), exit.ExitCode()
	}
	if err != nil {
		t.Fatalf("%s: %v", script, err)
	}
	return out.String(), 0
}

func must(t *testing.T, script string) string {
	t.Helper()
	out, code := sh(t, script)
	if code != 0 {
		t.Fatalf("%s: exit %d: %s", script, code, out)
	}
	return out
}

// as runs a shell script as user (with that user's groups).
func as(t *testing.T, user, script string) (string, int) {
	t.Helper()
	return sh(t, fmt.Sprintf("setpriv --reuid=%s --regid=%s --init-groups sh -c %q", user, user, script))
}

func TestTheDebInstallsUpgradesAndRemoves(t *testing.T) {
	testbed.Require(t)
	// The testbed's root is a throw-away overlay: dpkg's database and the
	// files it installs stay there.
	must(t, "dpkg -i "+deb("1.0.0"))
	for _, f := range []string{"/usr/bin/sandboxd", "/usr/bin/sandboxctl", "/usr/lib/systemd/system/sandboxd.service",
		"/usr/bin/sandboxd-kubelet", "/usr/lib/systemd/system/sandboxd-kubelet.service", "/etc/sandboxd/kubelet.env",
		"/usr/share/dbus-1/system.d/org.sandboxd1.conf", "/usr/share/dbus-1/system-services/org.sandboxd1.service",
		"/etc/sandboxd/sandboxd.toml", "/usr/share/man/man1/sandboxctl.1", "/usr/share/man/man8/sandboxd.8",
		"/usr/share/bash-completion/completions/sandboxctl", "/var/lib/sandboxd", "/var/log/sandboxd"} {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("after dpkg -i: %v", err)
		}
	}
	must(t, "getent group sandboxd")
	if out, _ := sh(t, "systemctl is-active sandboxd.service"); strings.TrimSpace(out) != "inactive" {
		t.Fatalf("sandboxd runs before anyone called it: %s", out)
	}
	// Enabled for boot (kept sandboxes run again after a reboot), not
	// started by the install.
	if out, _ := sh(t, "systemctl is-enabled sandboxd.service"); strings.TrimSpace(out) != "enabled" {
		t.Errorf("sandboxd.service after the first install: %q; want enabled for boot", out)
	}
	// The kubelet is optional: installed, neither enabled nor started.
	if out, _ := sh(t, "systemctl is-enabled sandboxd-kubelet.service"); strings.TrimSpace(out) != "disabled" {
		t.Errorf("sandboxd-kubelet.service after the first install: %q; want disabled", out)
	}
	if out, _ := sh(t, "systemctl is-active sandboxd-kubelet.service"); strings.TrimSpace(out) != "inactive" {
		t.Errorf("sandboxd-kubelet.service after the first install: %q; want inactive", out)
	}
	if out, code := sh(t, "sandboxd-kubelet --version"); code != 0 || out != "sandboxd-kubelet 1.0.0\n" {
		t.Errorf("sandboxd-kubelet --version: %q (exit %d)", out, code)
	}
	// The first call starts it.
	must(t, "busctl call org.sandboxd1 /org/sandboxd1 org.sandboxd1.Manager ListSandboxes")
	if out := must(t, "systemctl is-active sandboxd.service"); strings.TrimSpace(out) != "active" {
		t.Fatalf("sandboxd after a D-Bus call: %s", out)
	}
	if out := must(t, "sandboxd --version; sandboxctl --version"); out != "sandboxd 1.0.0\nsandboxctl version 1.0.0\n" {
		t.Errorf("versions: %q", out)
	}

	// A project on the embedded pool, and a user of the sandboxd group.
	must(t, `mkdir -p /var/lib/sandboxd/pool/projects && btrfs subvolume create /var/lib/sandboxd/pool/projects/demo &&
		echo hello > /var/lib/sandboxd/pool/projects/demo/hello.txt && chmod 755 /var/lib/sandboxd/pool/projects/demo &&
		sandboxctl project add --group sandboxd demo /var/lib/sandboxd/pool/projects/demo`)
	must(t, "useradd --create-home --groups sandboxd alice")
	id, code := as(t, "alice", "sandboxctl create -q --name kept demo")
	if code != 0 {
		t.Fatalf("create as a member of sandboxd: exit %d: %s", code, id)
	}
	id = strings.TrimSpace(id)
	if out, code := as(t, "alice", "sandboxctl exec kept -- sh -c 'cat hello.txt; id -un'"); code != 0 || out != "hello\nalice\n" {
		t.Errorf("exec as alice: exit %d: %q", code, out)
	}
	if out, code := as(t, "65534", "sandboxctl list"); code != 4 {
		t.Errorf("list as nobody: exit %d: %s; want 4 (denied)", code, out)
	}

	// The operator edits the configuration; an upgrade keeps the edit and
	// the sandbox.
	must(t, `sed -i 's/^log_level = "info"/log_level = "debug"/' /etc/sandboxd/sandboxd.toml && echo '# edited by the operator' >> /etc/sandboxd/sandboxd.toml`)
	// The admin's choice not to start it at boot holds through an upgrade.
	must(t, "systemctl disable --quiet sandboxd.service")
	before := strings.TrimSpace(must(t, "systemctl show -p MainPID --value sandboxd.service"))
	must(t, "dpkg -i "+deb("1.0.1"))
	if out, _ := sh(t, "systemctl is-enabled sandboxd.service"); strings.TrimSpace(out) != "disabled" {
		t.Errorf("sandboxd.service disabled by the admin, after an upgrade: %q; want disabled still", out)
	}
	must(t, "systemctl enable --quiet sandboxd.service")
	conf, _ := os.ReadFile("/etc/sandboxd/sandboxd.toml")
	if !strings.Contains(string(conf), `log_level = "debug"`) || !strings.Contains(string(conf), "# edited by the operator") {
		t.Errorf("the configuration after the upgrade lost the operator's edits:\n%s", conf)
	}
	if out := must(t, "dpkg-query -W -f '${Version}' sandboxd; echo; sandboxd --version"); out != "1.0.1\nsandboxd 1.0.1\n" {
		t.Errorf("after the upgrade: %q", out)
	}
	after := strings.TrimSpace(must(t, "systemctl show -p MainPID --value sandboxd.service"))
	if after == before || after == "0" {
		t.Errorf("the daemon was not restarted by the upgrade (MainPID %s, was %s)", after, before)
	}
	if out, code := as(t, "alice", "sandboxctl exec "+id+" -- cat hello.txt"); code != 0 || out != "hello\n" {
		t.Errorf("the sandbox after the upgrade: exit %d: %q", code, out)
	}

	// Remove: the service stops, state and configuration stay.
	must(t, "dpkg -r sandboxd")
	if out, _ := sh(t, "systemctl is-active sandboxd.service"); strings.TrimSpace(out) == "active" {
		t.Error("sandboxd still runs after dpkg -r")
	}
	for _, f := range []string{"/var/lib/sandboxd/state.db", "/etc/sandboxd/sandboxd.toml"} {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("after dpkg -r: %v (state and configuration are kept until purge)", err)
		}
	}
	if _, err := os.Stat("/usr/bin/sandboxd"); err == nil {
		t.Error("/usr/bin/sandboxd is still there after dpkg -r")
	}

	// Purge: sandboxes end, state, logs and configuration go.
	must(t, "dpkg -P sandboxd")
	for _, f := range []string{"/var/lib/sandboxd", "/var/log/sandboxd", "/etc/sandboxd"} {
		if _, err := os.Stat(f); err == nil {
			t.Errorf("%s is still there after dpkg -P", f)
		}
	}
	if out := must(t, "systemctl list-units --all --no-legend 'sandbox-*.scope' | grep -c running || true"); strings.TrimSpace(out) != "0" {
		t.Errorf("sandbox scopes still running after purge: %s", out)
	}
	if _, err := os.Lstat("/etc/systemd/system/multi-user.target.wants/sandboxd.service"); err == nil {
		t.Error("sandboxd.service is still enabled for boot after dpkg -P")
	}
	if out, _ := sh(t, "findmnt -n /var/lib/sandboxd/pool"); out != "" {
		t.Errorf("the embedded pool is still mounted after purge: %s", out)
	}
}

// The .rpm holds the same files and scripts as the .deb.
func TestTheRpmMatchesTheDeb(t *testing.T) {
	v := versions[0]
	rpmList := lines(must(t, "rpm -qlp "+rpmFile(v)+" 2>/dev/null"))
	var debList []string
	for _, l := range lines(must(t, "dpkg-deb -c "+deb(v))) {
		f := strings.Fields(l)
		if p := strings.TrimPrefix(f[len(f)-1], "."); !strings.HasSuffix(p, "/") {
			debList = append(debList, p)
		}
	}
	sort.Strings(rpmList)
	sort.Strings(debList)
	if !slices.Equal(rpmList, debList) {
		t.Errorf("files of the rpm:\n%s\nof the deb:\n%s", strings.Join(rpmList, "\n"), strings.Join(debList, "\n"))
	}
	scripts := must(t, "rpm -qp --scripts "+rpmFile(v)+" 2>/dev/null")
	for _, want := range []string{"postinstall scriptlet", "systemd-sysusers sandboxd.conf", "preuninstall scriptlet",
		"systemctl stop sandboxd.service", "postuninstall scriptlet", "daemon-reload"} {
		if !strings.Contains(scripts, want) {
			t.Errorf("the rpm's scripts lack %q:\n%s", want, scripts)
		}
	}
	if conf := lines(must(t, "rpm -qcp "+rpmFile(v)+" 2>/dev/null")); !slices.Equal(slices.Sorted(slices.Values(conf)), []string{"/etc/sandboxd/kubelet.env", "/etc/sandboxd/sandboxd.toml"}) {
		t.Errorf("the rpm's config files: %q", conf)
	}
}

func lines(s string) []string {
	var out []string
	for l := range strings.SplitSeq(strings.TrimSpace(s), "\n") {
		if l != "" {
			out = append(out, l)
		}
	}
	return out
}
