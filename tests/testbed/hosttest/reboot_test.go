package hosttest

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/tests/testbed"
)

// A reboot keeps what the pools and the root's layer hold, and nothing
// that ran or lived in /run and /tmp: as a host's power cut and boot.
func TestRebootKeepsThePoolsAndEndsTheProcesses(t *testing.T) {
	if err := testbed.Preflight(); err != nil {
		t.Fatal(err)
	}
	base := filepath.Join(testbed.DefaultDir, "hosttest")
	tb, err := testbed.Up(t.Context(), testbed.Config{Dir: base, DieWithParent: true, Logf: t.Logf})
	if err != nil {
		t.Fatalf("bringing a testbed up: %v", err)
	}
	t.Cleanup(func() {
		if err := tb.Down(); err != nil {
			t.Errorf("ending the testbed: %v", err)
		}
	})
	run := func(argv ...string) string {
		t.Helper()
		out, err := tb.Run(t.Context(), argv...)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(out)
	}
	files := map[string]string{
		filepath.Join(tb.Btrfs.Project, "kept.txt"):        "on btrfs\n",
		filepath.Join(tb.ZFS.Mountpoint, "kept.txt"):       "on zfs\n",
		"/var/lib/testbed-reboot/kept.txt":                 "on the root's layer\n",
		filepath.Join(tb.Btrfs.Mount, "sub", "nested.txt"): "below a new directory\n",
	}
	for path, text := range files {
		run("sh", "-c", `mkdir -p "$(dirname "$1")" && printf %s "$2" >"$1" && sync "$1"`, "-", path, text)
	}
	run("btrfs", "subvolume", "snapshot", tb.Btrfs.Project, filepath.Join(tb.Btrfs.Mount, "snap"))
	run("zfs", "snapshot", tb.ZFS.Project+"@before")
	run("touch", "/run/gone.txt", "/tmp/gone.txt")
	run("systemd-run", "--quiet", "--unit=before-reboot.service", "sleep", "infinity")
	// The sleep's pid as the host sees it (systemd's MainPID is the
	// namespace's): its start time tells it apart from a reuse.
	hostPID := hostPIDOf(t, tb, run("systemctl", "show", "-P", "MainPID", "before-reboot.service"))
	oldPID := tb.PID

	if err := tb.Reboot(t.Context()); err != nil {
		t.Fatalf("Reboot: %v", err)
	}
	if tb.PID == oldPID || tb.PID == 0 {
		t.Fatalf("the testbed's systemd after Reboot: pid %d (before: %d); want a new one", tb.PID, oldPID)
	}
	if state := run("systemctl", "is-system-running"); state != "running" {
		t.Fatalf("after Reboot, systemd is %q", state)
	}
	for path, text := range files {
		if got := run("cat", path); got != strings.TrimSpace(text) {
			t.Errorf("%s after Reboot: %q; want %q", path, got, text)
		}
	}
	if got := run("cat", filepath.Join(tb.Btrfs.Mount, "snap", "kept.txt")); got != "on btrfs" {
		t.Errorf("the btrfs snapshot's file after Reboot: %q", got)
	}
	if got := run("zfs", "list", "-H", "-t", "snapshot", "-o", "name"); !strings.Contains(got, tb.ZFS.Project+"@before") {
		t.Errorf("zfs snapshots after Reboot: %q; want %s@before", got, tb.ZFS.Project)
	}
	if got := run("sh", "-c", "ls -A /run/gone.txt /tmp/gone.txt 2>/dev/null || true"); got != "" {
		t.Errorf("after Reboot, /run and /tmp still hold %q", got)
	}
	if state, _ := tb.Run(t.Context(), "systemctl", "is-active", "before-reboot.service"); strings.TrimSpace(state) != "inactive" {
		t.Errorf("the service started before Reboot is %q after it; want inactive", strings.TrimSpace(state))
	}
	if hostPID.alive() {
		t.Errorf("the process started before Reboot (host pid %d) still runs", hostPID.pid)
	}
	// The same testbed ends as any other: nothing left.
	att, err := testbed.Attach(base)
	if err != nil || att.PID != tb.PID {
		t.Fatalf("Attach after Reboot: %v (pid %v); want the new systemd %d", err, att, tb.PID)
	}
}

// proc is a host process, told apart from a later one of the same pid.
type proc struct {
	pid   int
	start string
}

func (p proc) alive() bool {
	return procState(strconv.Itoa(p.pid)) != "X" && procStart(strconv.Itoa(p.pid)) == p.start
}

// hostPIDOf finds the host pid of the testbed's process nsPID, through
// the NSpid line of the candidates' status (pid namespaces nest).
func hostPIDOf(t *testing.T, tb *testbed.Testbed, nsPID string) proc {
	t.Helper()
	ns, err := os.Readlink(filepath.Join("/proc", strconv.Itoa(tb.PID), "ns", "pid"))
	if err != nil {
		t.Fatal(err)
	}
	for _, pid := range processesIn(t, ns) {
		if f := strings.Fields(statusField(pid, "NSpid")); len(f) > 1 && f[len(f)-1] == nsPID {
			n, _ := strconv.Atoi(pid)
			return proc{pid: n, start: procStart(pid)}
		}
	}
	t.Fatalf("no host process is pid %s of the testbed", nsPID)
	return proc{}
}

// procStart is field 22 of /proc/PID/stat (the start time), "" if gone.
func procStart(pid string) string {
	data, err := os.ReadFile(filepath.Join("/proc", pid, "stat"))
	if err != nil {
		return ""
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return ""
	}
	if f := strings.Fields(s[i+1:]); len(f) > 19 {
		return f[19]
	}
	return ""
}

// statusField is a field of /proc/PID/status, "" if absent.
func statusField(pid, name string) string {
	data, err := os.ReadFile(filepath.Join("/proc", pid, "status"))
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(string(data), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && k == name {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// A command that asks for a reboot (through the FIFO RebootTest writes
// to) runs again after it with the arguments it gave; a failure it
// reported before the reboot fails the run, though the run after passes.
func TestRunRebootsAndRunsAgainAndKeepsAFailureBefore(t *testing.T) {
	bin := buildTestbed(t)
	base := filepath.Join(testbed.DefaultDir, "hosttest")
	const before = `set -e
echo "--- FAIL: TestBefore (0.00s)"
cut -d' ' -f22 /proc/1/stat >/tmp/boot
printf '%s\n' '{"test":"TestAcross","args":["-c","echo resumed: $SANDBOXD_TESTBED_RESUME; ls /tmp"],"state":{"n":1}}' >"$(dirname "$SANDBOXD_TESTBED")/reboot.fifo"
exec sleep 120`
	cmd := exec.Command(bin, "run", "--", "sh", "-c", before)
	cmd.Env = append(os.Environ(), testbed.EnvDir+"="+base)
	t.Cleanup(func() {
		_ = testbed.Stop(t.Context(), base)
		_ = os.Remove(base)
	})
	out, err := cmd.Output()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Errorf("testbed run of a command that failed a test, then asked for a reboot: %v; want exit status 1", err)
	}
	want := `--- FAIL: TestBefore (0.00s)
resumed: {"test":"TestAcross","args":["-c","echo resumed: $SANDBOXD_TESTBED_RESUME; ls /tmp"],"state":{"n":1}}
`
	if string(out) != want {
		t.Errorf("testbed run's output across the reboot:\n%s\nwant (after the reboot, /tmp empty):\n%s", out, want)
	}
}
