// Package integration drives the real sandboxd, installed as a systemd
// service in the testbed, over the real system bus, as an operator or an
// agent would: with busctl and systemctl.
package integration

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/tests/testbed"
)

// daemonBin is built on the host before the testbed starts, into the
// repository (which the testbed shows at the same path).
var daemonBin string

func TestMain(m *testing.M) {
	wd, _ := os.Getwd()
	root := filepath.Dir(filepath.Dir(wd)) // tests/integration -> repository
	daemonBin = filepath.Join(root, "bin", "test", "sandboxd")
	if !testbed.Inside() {
		for _, prog := range []string{"sandboxd", "sandboxctl"} {
			build := exec.Command("go", "build", "-o", filepath.Join(filepath.Dir(daemonBin), prog), "./cmd/"+prog)
			build.Dir = root
			out, err := build.CombinedOutput()
			if err != nil {
				fmt.Fprintf(os.Stderr, "building %s: %v\n%s", prog, err, out)
				os.Exit(2)
			}
		}
	}
	testbed.Main(m)
}

// installed is set once the daemon is installed in this testbed.
var installed bool

// install puts sandboxd in the testbed as a sysadmin would: the config in
// /etc/sandboxd, the bus policy in /etc/dbus-1/system.d, the unit file, and
// starts it. The testbed's root is a throw-away overlay.
func install(t *testing.T) *testbed.Info {
	t.Helper()
	tb := testbed.Require(t)
	if installed {
		return tb
	}
	repo := filepath.Dir(filepath.Dir(daemonBin))
	repo = filepath.Dir(repo)
	if err := os.WriteFile(filepath.Join(tb.Btrfs.Project, "index.html"), []byte("<h1>web</h1>\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	testbed.InstallService(t, repo, daemonBin, baseConfig(tb), nil)
	installed = true
	return tb
}

// baseConfig is the tests' sandboxd.toml (testbed.Info.SandboxdConfig).
func baseConfig(tb *testbed.Info) string { return tb.SandboxdConfig("") }

var (
	createdRe = regexp.MustCompile(`^so "([0-9a-f]+)" "(/org/sandboxd1/sandbox/[^"]+)"`)
	stringRe  = regexp.MustCompile(`^s "(.*)"`)
)

// create makes a sandbox with busctl and returns its id and object path.
func create(t *testing.T, args ...string) (string, string) {
	t.Helper()
	argv := append([]string{"busctl", "call", "org.sandboxd1", "/org/sandboxd1", "org.sandboxd1.Manager", "CreateSandbox", "sa{sv}", "web"}, args...)
	if len(args) == 0 {
		argv = append(argv, "0")
	}
	out := testbed.MustRun(t, argv...)
	m := createdRe.FindStringSubmatch(strings.TrimSpace(out))
	if m == nil {
		t.Fatalf("CreateSandbox answered %q", out)
	}
	return m[1], m[2]
}

func property(t *testing.T, object, name string) string {
	t.Helper()
	out := testbed.MustRun(t, "busctl", "get-property", "org.sandboxd1", object, "org.sandboxd1.Sandbox", name)
	m := stringRe.FindStringSubmatch(strings.TrimSpace(out))
	if m == nil {
		t.Fatalf("property %s of %s: %q", name, object, out)
	}
	return m[1]
}

func TestTheServiceServesSandboxesOverTheBus(t *testing.T) {
	install(t)
	if state := strings.TrimSpace(testbed.MustRun(t, "systemctl", "is-active", "sandboxd.service")); state != "active" {
		t.Fatalf("sandboxd.service is %s", state)
	}
	id, object := create(t, "1", "MemoryMax", "t", "268435456")
	if got := property(t, object, "State"); got != "ready" {
		t.Fatalf("State = %q; want ready", got)
	}
	path := property(t, object, "Path")
	if data, err := os.ReadFile(filepath.Join(path, "index.html")); err != nil || string(data) != "<h1>web</h1>\n" {
		t.Fatalf("the sandbox's index.html: %q, %v", data, err)
	}
	unit := property(t, object, "Unit")
	if max := strings.TrimSpace(testbed.MustRun(t, "systemctl", "show", "-P", "MemoryMax", unit)); max != "268435456" {
		t.Fatalf("%s MemoryMax = %s; want 268435456", unit, max)
	}
	// Inspect: staleness and live usage.
	if got := property(t, object, "Staleness"); got != "current" {
		t.Fatalf("Staleness = %q; want current", got)
	}
	// The init is a Go process: its runtime threads count as tasks too.
	if out := testbed.MustRun(t, "busctl", "get-property", "org.sandboxd1", object, "org.sandboxd1.Sandbox", "Usage"); !regexp.MustCompile(`"TasksCurrent" t [1-9]`).MatchString(out) {
		t.Fatalf("Usage = %q; want the init's tasks counted", out)
	}
	// Freeze and thaw, as the State property tells.
	call := func(method string) ([]byte, error) {
		return exec.Command("busctl", "call", "org.sandboxd1", object, "org.sandboxd1.Sandbox", method).CombinedOutput()
	}
	if out, err := call("Freeze"); err != nil {
		t.Fatalf("Freeze: %v: %s", err, out)
	}
	if got := property(t, object, "State"); got != "frozen" {
		t.Fatalf("State after Freeze = %q", got)
	}
	if out, err := call("Thaw"); err != nil {
		t.Fatalf("Thaw: %v: %s", err, out)
	}
	if out, err := call("Thaw"); err == nil || !strings.Contains(string(out), "ready") {
		t.Fatalf("a second Thaw: %v, %q; want a refusal naming the state", err, out)
	}
	// The journal has the create under the sandbox's own field.
	if out := testbed.MustRun(t, "journalctl", "--no-pager", "-o", "cat", "SANDBOX_ID="+id); !strings.Contains(out, "created") {
		t.Fatalf("journalctl SANDBOX_ID=%s: %q", id, out)
	}
	testbed.MustRun(t, "busctl", "call", "org.sandboxd1", "/org/sandboxd1", "org.sandboxd1.Manager", "DestroySandbox", "s", id)
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("the sandbox's files after destroy: %v", err)
	}
	// The audit log has both calls, by root (uid 0).
	audit, err := os.ReadFile("/var/log/sandboxd/audit.log")
	if err != nil {
		t.Fatal(err)
	}
	for _, action := range []string{"create", "destroy"} {
		want := fmt.Sprintf(`"caller_uid":0,"action":%q,"sandbox":%q`, action, id)
		if !strings.Contains(string(audit), want) {
			t.Fatalf("the audit log has no %s of %s by uid 0:\n%s", action, id, audit)
		}
	}
}

func TestLimitsThatMakeNoSenseAreRefused(t *testing.T) {
	install(t)
	for _, opt := range [][]string{{"MemoryMax", "t", "0"}, {"TasksMax", "t", "0"}, {"Bogus", "t", "1"}, {"MemoryMax", "s", "lots"}} {
		args := append([]string{"busctl", "call", "org.sandboxd1", "/org/sandboxd1", "org.sandboxd1.Manager", "CreateSandbox", "sa{sv}", "web", "1"}, opt...)
		out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), opt[0]) {
			t.Errorf("CreateSandbox with %v: %v, %q; want a refusal naming %s", opt, err, out, opt[0])
		}
	}
	out, err := exec.Command("busctl", "call", "org.sandboxd1", "/org/sandboxd1", "org.sandboxd1.Manager", "CreateSandbox", "sa{sv}", "nosuch", "0").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "nosuch") {
		t.Errorf("CreateSandbox of an unknown project: %v, %q", err, out)
	}
	if ids := listedIDs(t); len(ids) != 0 {
		t.Fatalf("refused creates left sandboxes: %v", ids)
	}
}

func TestACallerOutsideTheGroupIsRefused(t *testing.T) {
	install(t)
	cmd := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
		"busctl", "call", "org.sandboxd1", "/org/sandboxd1", "org.sandboxd1.Manager", "CreateSandbox", "sa{sv}", "web", "0")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "Access denied") && !strings.Contains(string(out), "AccessDenied") {
		t.Fatalf("CreateSandbox as nobody: %v, %q; want access denied", err, out)
	}
}

func TestASecondDaemonIsRefused(t *testing.T) {
	install(t)
	out, err := exec.Command(daemonBin).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "another sandboxd") {
		t.Fatalf("a second sandboxd: %v, %q; want a refusal naming the running one", err, out)
	}
	if state := strings.TrimSpace(testbed.MustRun(t, "systemctl", "is-active", "sandboxd.service")); state != "active" {
		t.Fatalf("the running service after a second start: %s", state)
	}
}

func TestAStopLeavesSandboxesAndACorruptStateFileLosesNothing(t *testing.T) {
	install(t)
	id, object := create(t)
	unit := property(t, object, "Unit")
	path := property(t, object, "Path")

	// systemctl stop: SIGTERM, a clean exit; the sandbox keeps running.
	testbed.MustRun(t, "systemctl", "stop", "sandboxd.service")
	if result := strings.TrimSpace(testbed.MustRun(t, "systemctl", "show", "-P", "Result", "sandboxd.service")); result != "success" {
		t.Fatalf("sandboxd stopped with result %q; want success", result)
	}
	if state := strings.TrimSpace(string(must1(exec.Command("systemctl", "is-active", unit).Output()))); state != "active" {
		t.Fatalf("the sandbox's scope after the daemon stopped: %s; want active", state)
	}

	// The state database is lost to garbage while the daemon is down.
	if err := os.WriteFile("/var/lib/sandboxd/state.db", bytes.Repeat([]byte("garbage "), 4096), 0o600); err != nil {
		t.Fatal(err)
	}
	testbed.MustRun(t, "systemctl", "start", "sandboxd.service")
	if ids := strings.Join(listedIDs(t), " "); !strings.Contains(ids, id) {
		t.Fatalf("sandbox %s after a corrupt state file: listed %s", id, ids)
	}
	if _, err := os.Stat(filepath.Join(path, "index.html")); err != nil {
		t.Fatalf("sandbox %s's files after a corrupt state file: %v", id, err)
	}
	corrupt, _ := filepath.Glob("/var/lib/sandboxd/state.db.corrupt-*")
	if len(corrupt) != 1 {
		t.Fatalf("the corrupt database was not kept aside: %v", corrupt)
	}
	if out := testbed.MustRun(t, "journalctl", "--no-pager", "-o", "cat", "-u", "sandboxd.service"); !strings.Contains(out, "rebuilt from its mirror") {
		t.Fatalf("the journal does not say the state was rebuilt:\n%s", out)
	}
	testbed.MustRun(t, "busctl", "call", "org.sandboxd1", "/org/sandboxd1", "org.sandboxd1.Manager", "DestroySandbox", "s", id)
}

// mainPID is the daemon's pid as the testbed sees it.
func mainPID(t *testing.T) int {
	t.Helper()
	pid, err := strconv.Atoi(strings.TrimSpace(testbed.MustRun(t, "systemctl", "show", "-P", "MainPID", "sandboxd.service")))
	if err != nil || pid == 0 {
		status, _ := exec.Command("systemctl", "status", "--no-pager", "sandboxd.service").CombinedOutput()
		journal, _ := exec.Command("journalctl", "--no-pager", "-n", "40", "-u", "sandboxd.service").CombinedOutput()
		t.Fatalf("sandboxd's MainPID: %v (%d)\n%s\n%s", err, pid, status, journal)
	}
	return pid
}

// waitActive waits for systemd to have restarted the daemon.
func waitActive(t *testing.T, old int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var state string
	for time.Now().Before(deadline) {
		state = strings.TrimSpace(string(must1(exec.Command("systemctl", "is-active", "sandboxd.service").Output())))
		if state == "active" {
			// Right after the kill, systemd may not have noticed yet: it
			// still says active, then MainPID reads 0 while it restarts.
			out := must1(exec.Command("systemctl", "show", "-P", "MainPID", "sandboxd.service").Output())
			if pid, _ := strconv.Atoi(strings.TrimSpace(string(out))); pid != 0 && pid != old {
				return
			}
		}
		if state == "failed" || state == "inactive" {
			// Many kills in a few seconds hit systemd's start limit (5
			// in 10s), as they should; an operator would reset it.
			testbed.MustRun(t, "systemctl", "reset-failed", "sandboxd.service")
			testbed.MustRun(t, "systemctl", "start", "sandboxd.service")
		}
		time.Sleep(50 * time.Millisecond)
	}
	journal, _ := exec.Command("journalctl", "--no-pager", "-n", "40", "-u", "sandboxd.service").CombinedOutput()
	// systemd's own account too: a unit left deactivating (a process of
	// its cgroup that outlived the kill) or never restarted says so here.
	status, _ := exec.Command("systemctl", "status", "--no-pager", "-n", "0", "sandboxd.service").CombinedOutput()
	t.Fatalf("sandboxd did not come back within 30s of kill -9 (last seen %q); systemd says:\n%s\nits journal's end:\n%s", state, status, journal)
}

func must1(b []byte, _ error) []byte { return b }

// volumesAndScopes lists what exists of sandboxd's on the machine.
func volumesAndScopes(t *testing.T, root string) ([]string, []string) {
	t.Helper()
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	var vols []string
	for _, e := range entries {
		// An owner's cache (cache-u<uid>, or cachefs-u<uid> where it is a
		// filesystem of its own) is no sandbox's: it outlives them.
		if !strings.HasPrefix(e.Name(), ".") && !strings.HasPrefix(e.Name(), "cache-u") && !strings.HasPrefix(e.Name(), "cachefs-u") {
			vols = append(vols, e.Name())
		}
	}
	out := testbed.MustRun(t, "systemctl", "list-units", "--all", "--plain", "--no-legend", "sandbox-*.scope")
	var scopes []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			scopes = append(scopes, f[0])
		}
	}
	return vols, scopes
}

func listedIDs(t *testing.T) []string {
	t.Helper()
	out := testbed.MustRun(t, "busctl", "--json=short", "call", "org.sandboxd1", "/org/sandboxd1", "org.sandboxd1.Manager", "ListSandboxes")
	return regexp.MustCompile(`"([0-9a-f]{12})"`).FindAllString(out, -1)
}

func TestKill9DuringCreateAndDestroyLosesNothing(t *testing.T) {
	tb := install(t)
	root := filepath.Join(tb.Btrfs.Mount, "sandboxd")
	ready := map[string]string{} // id -> object, of creates that answered
	// Sandboxes made before the trials: each must survive every kill that
	// is not its own destroy.
	// Their time sets the kill schedule: a fixed one proves nothing on a
	// machine where a create takes longer than its last kill's delay.
	var slowest time.Duration
	for range 4 {
		start := time.Now()
		id, object := create(t)
		slowest = max(slowest, time.Since(start))
		ready[id] = object
	}
	answered := 0
	const trials = 16
	step := slowest * 3 / 2 / (trials / 2)
	for trial := range trials {
		pid := mainPID(t)
		// A create (or, every other trial, a destroy) in flight...
		var call *exec.Cmd
		if trial%2 == 1 && len(ready) > 0 {
			for id := range ready {
				call = exec.Command("busctl", "call", "org.sandboxd1", "/org/sandboxd1", "org.sandboxd1.Manager", "DestroySandbox", "s", id)
				delete(ready, id) // whatever happens, it may be gone
				break
			}
		} else {
			call = exec.Command("busctl", "call", "org.sandboxd1", "/org/sandboxd1", "org.sandboxd1.Manager", "CreateSandbox", "sa{sv}", "web", "0")
		}
		var out bytes.Buffer
		call.Stdout = &out
		if err := call.Start(); err != nil {
			t.Fatal(err)
		}
		// ...and the daemon killed at a different moment of it each time,
		// from its start to half again the slowest create's time; the last
		// create is killed the moment it has answered, so that "reported
		// ready" is checked on every machine, however slow.
		var callErr error
		if trial == trials-2 {
			callErr = call.Wait()
			testbed.MustRun(t, "kill", "-9", strconv.Itoa(pid))
		} else {
			time.Sleep(time.Duration(trial/2) * step)
			testbed.MustRun(t, "kill", "-9", strconv.Itoa(pid))
			callErr = call.Wait()
		}
		if callErr == nil {
			if m := createdRe.FindStringSubmatch(strings.TrimSpace(out.String())); m != nil {
				ready[m[1]] = m[2]
				answered++
			}
		}
		waitActive(t, pid)

		// After the restart: every sandbox reported ready is usable, and
		// nothing exists that the daemon does not list.
		ids := listedIDs(t)
		for id, object := range ready {
			if !strings.Contains(strings.Join(ids, " "), id) {
				t.Fatalf("trial %d: sandbox %s was reported ready and is gone after kill -9", trial, id)
			}
			if _, err := os.Stat(filepath.Join(property(t, object, "Path"), "index.html")); err != nil {
				t.Fatalf("trial %d: sandbox %s's files after kill -9: %v", trial, id, err)
			}
		}
		vols, scopes := volumesAndScopes(t, root)
		listed := strings.Join(ids, " ")
		for _, v := range vols {
			id := v[strings.IndexByte(v, '-')+1:]
			if !strings.Contains(listed, id) {
				t.Fatalf("trial %d: orphan volume %s after kill -9 and restart (listed: %s)", trial, v, listed)
			}
		}
		for _, s := range scopes {
			id := strings.TrimSuffix(strings.TrimPrefix(s, "sandbox-"), ".scope")
			if !strings.Contains(listed, id) {
				t.Fatalf("trial %d: orphan scope %s after kill -9 and restart", trial, s)
			}
		}
		if len(vols) != 3*len(ids) || len(scopes) != len(ids) { // base, copy, system layer
			t.Fatalf("trial %d: %d volumes and %d scopes for %d sandboxes", trial, len(vols), len(scopes), len(ids))
		}
	}
	// Some creates must have answered before their kill, or the check of
	// "reported ready, still usable" above checked nothing.
	if answered == 0 {
		t.Fatal("no create answered before its kill -9: the trials proved nothing")
	}
	t.Logf("%d kill -9 trials during create and destroy (0 to %v into the call); %d creates answered; %d sandboxes alive at the end", trials, (trials/2-1)*step, answered, len(ready))
}
