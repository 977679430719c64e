package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/tests/testbed"
)

// Issue 28's findings 1 and 2: `project adopt --restart-units` took the
// unit of a process that uses the directory from the last element of its
// cgroup's path, which below a delegated unit (a booted sandbox's
// payload/, a user's manager) its processes name, and started every such
// unit again whatever its state; and a process was taken for a user of
// the host's directory by the path /proc shows, which a sandbox's overlay
// shows too.

// markerUnit installs template unit adopt-marker@.service, which makes
// /run/adopt-marker-INSTANCE when started (harmless, as modprobe@X is
// not), and returns the marker of instance.
func markerUnit(t *testing.T) func(instance string) string {
	t.Helper()
	file := "/run/systemd/system/adopt-marker@.service"
	if err := os.WriteFile(file, []byte("[Service]\nType=oneshot\nExecStart=/bin/touch /run/adopt-marker-%i\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	testbed.MustRun(t, "systemctl", "daemon-reload")
	t.Cleanup(func() {
		os.Remove(file)
		_ = exec.Command("systemctl", "daemon-reload").Run()
		m, _ := filepath.Glob("/run/adopt-marker-*")
		for _, f := range m {
			os.Remove(f)
		}
	})
	return func(instance string) string { return "/run/adopt-marker-" + instance }
}

// cgroupOf is the last line of /proc/PID/cgroup (the unified hierarchy's,
// as the old reading took it).
func cgroupOf(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return lines[len(lines)-1]
}

// scopeDirs are sandbox id's scope's cgroup directories in the unified
// hierarchy and in systemd's own (hybrid), each with payload/ when it has
// one.
func scopeDirs(t *testing.T, id string) []string {
	t.Helper()
	var out []string
	for _, h := range []string{"/sys/fs/cgroup/unified", "/sys/fs/cgroup/systemd", "/sys/fs/cgroup"} {
		found := strings.Fields(testbed.MustRun(t, "find", h, "-maxdepth", "5", "-type", "d", "-name", "*"+id+"*.scope"))
		for _, d := range found {
			if exists(filepath.Join(d, "payload")) {
				d = filepath.Join(d, "payload")
			}
			out = append(out, d)
		}
		if h == "/sys/fs/cgroup/systemd" && len(out) > 0 {
			break // hybrid: not the v1 controllers' too
		}
	}
	if len(out) == 0 {
		t.Fatalf("no cgroup of sandbox %s's scope", id)
	}
	return out
}

// moveInto makes cgroup name in each of dirs and moves pid there.
func moveInto(t *testing.T, pid int, name string, dirs []string) {
	t.Helper()
	for _, d := range dirs {
		cg := filepath.Join(d, name)
		if err := os.MkdirAll(cg, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(cg, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
			t.Fatalf("moving pid %d into %s: %v", pid, cg, err)
		}
	}
}

// The attack as issue 28 found it: root in a booted sandbox puts a
// process in a cgroup of its payload/ named like a host unit that is not
// running, working in its overlay's view of a host directory. The admin's
// `adopt --restart-units` of that directory must not start the host's
// unit, and the sandbox's process must not keep the directory from being
// adopted; a process the host's root put in that subtree working in the
// host's directory itself is refused as a unit to restart (by systemd's
// answer, not the cgroup's name), and a host process still holds it.
func TestHostileSandboxCgroupNamedLikeAHostUnitIsNotStarted(t *testing.T) {
	install(t)
	marker := markerUnit(t)
	// The control: the unit, started, makes its marker.
	testbed.MustRun(t, "systemctl", "start", "adopt-marker@control.service")
	if !exists(marker("control")) {
		t.Fatal("starting adopt-marker@control.service made no marker: the checks below would prove nothing")
	}
	const dir = "/srv/hostile-adopt"
	os.RemoveAll(dir)
	plainTree(t, dir)
	t.Cleanup(func() { ctl(t, "", "project", "release", "hostile-adopt"); os.RemoveAll(dir) })
	id, _ := bootSandbox(t, "web")

	// The sandbox's root: a process in payload/adopt-marker@evil.service,
	// working in the sandbox's /srv/hostile-adopt.
	const cg = "/sys/fs/cgroup/adopt-marker@evil.service"
	out := svc(t, id, `mkdir -p `+cg+` && cd `+dir+` && ls index.html &&
		{ setsid sleep 600 </dev/null >/dev/null 2>&1 & echo $! >`+cg+`/cgroup.procs && echo moved; }`)
	if !strings.Contains(out, "moved") {
		t.Fatalf("the sandbox's root could not put a process in a cgroup of its own naming (%q): the checks below would prove nothing", out)
	}
	var evil int
	for _, d := range strings.Fields(testbed.MustRun(t, "find", "/sys/fs/cgroup", "-maxdepth", "8", "-type", "d", "-name", "adopt-marker@evil.service")) {
		b, _ := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		if f := strings.Fields(string(b)); len(f) > 0 {
			evil, _ = strconv.Atoi(f[0])
		}
	}
	if evil == 0 {
		t.Fatal("found no host pid of the sandbox's process in adopt-marker@evil.service")
	}
	t.Cleanup(func() { _ = exec.Command("kill", "-9", strconv.Itoa(evil)).Run() })
	// What fooled the old reading: /proc shows the host's path, and a
	// cgroup ending in the unit's name outside /user.slice/.
	if cwd, _ := os.Readlink(fmt.Sprintf("/proc/%d/cwd", evil)); cwd != dir || !strings.HasSuffix(cgroupOf(t, evil), "/adopt-marker@evil.service") {
		t.Fatalf("the sandbox's process %d works in %q, in cgroup %q: not the attack", evil, cwd, cgroupOf(t, evil))
	}

	// The host's root puts a process of its own, working in the host's
	// directory, in that delegated subtree: it holds the directory, and
	// is of the sandbox's scope, which is no unit to restart.
	host := exec.Command("sleep", "600")
	host.Dir = dir
	if err := host.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { host.Process.Kill(); host.Wait() })
	moveInto(t, host.Process.Pid, "adopt-marker@host.service", scopeDirs(t, id))
	fails(t, 5, fmt.Sprintf(`pid %d \(sleep\) is of \S+\.scope, (in sandboxd\.slice|a delegated subtree)`, host.Process.Pid),
		"project", "adopt", "--restart-units", "hostile-adopt", dir)
	for _, m := range []string{"host", "evil"} {
		if exists(marker(m)) {
			t.Errorf("an adoption with --restart-units started the host's adopt-marker@%s.service, named by a cgroup in a sandbox's delegated subtree", m)
		}
	}
	host.Process.Kill()
	host.Wait()

	// A host process working there still holds it (nothing restarts
	// it: it is of no service); then, gone, the sandbox's process alone
	// does not.
	plain := exec.Command("sleep", "600")
	plain.Dir = dir
	if err := plain.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { plain.Process.Kill(); plain.Wait() })
	fails(t, 5, fmt.Sprintf(`pid %d \(sleep\)`, plain.Process.Pid), "project", "adopt", "hostile-adopt", dir)
	plain.Process.Kill()
	plain.Wait()
	if _, errOut, code := ctl(t, "", "project", "adopt", "--restart-units", "hostile-adopt", dir); code != 0 {
		t.Errorf("a sandbox's process working in its overlay's view of %s kept it from being adopted: exit %d: %s", dir, code, errOut)
	}
	if exists(marker("evil")) {
		t.Error("an adoption with --restart-units started the host's adopt-marker@evil.service, named by a cgroup a sandbox's root made")
	}
}

// A unit that is not running is never started by an adoption: here one
// that left a process working in the directory when it ended (its
// KillMode=process), so that systemd says the process is of it.
func TestAdoptStartsAgainOnlyTheServicesThatRan(t *testing.T) {
	install(t)
	const dir, unit, starts = "/srv/adopt-leftover", "adopt-leftover.service", "/run/adopt-leftover.starts"
	os.RemoveAll(dir)
	plainTree(t, dir)
	os.Remove(starts)
	unitFile := filepath.Join("/run/systemd/system", unit)
	text := "[Service]\nType=oneshot\nKillMode=process\nWorkingDirectory=" + dir +
		"\nExecStart=/bin/sh -c 'echo started >>" + starts + "; setsid sleep 600 </dev/null >/dev/null 2>&1 &'\n"
	if err := os.WriteFile(unitFile, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	testbed.MustRun(t, "systemctl", "daemon-reload")
	t.Cleanup(func() {
		_ = exec.Command("systemctl", "kill", "--signal=KILL", unit).Run()
		_ = exec.Command("systemctl", "stop", unit).Run()
		os.Remove(unitFile)
		_ = exec.Command("systemctl", "daemon-reload").Run()
		ctl(t, "", "project", "release", "leftover")
		os.RemoveAll(dir)
		os.Remove(starts)
	})
	testbed.MustRun(t, "systemctl", "start", unit)
	if st := strings.TrimSpace(string(must1(exec.Command("systemctl", "is-active", unit).Output()))); st != "inactive" {
		t.Fatalf("%s after its start: %s, want inactive (its process left behind)", unit, st)
	}
	// The control: its process holds the directory, and is of the unit.
	fails(t, 5, `pid \d+ \(\S+\) of unit `+regexp.QuoteMeta(unit), "project", "adopt", "leftover", dir)

	// Refused or done (the process stays), the unit is not started.
	_, errOut, code := ctl(t, "", "project", "adopt", "--restart-units", "leftover", dir)
	t.Logf("adopt --restart-units with %s inactive: exit %d: %s", unit, code, strings.TrimSpace(errOut))
	if b, _ := os.ReadFile(starts); strings.Count(string(b), "started") != 1 {
		t.Errorf("%s, inactive when the adoption began, was started by it (%d starts in all)", unit, strings.Count(string(b), "started"))
	}
}
