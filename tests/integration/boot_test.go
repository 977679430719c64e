package integration

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/tests/testbed"
)

// Issue 18's --boot: a sandbox with a systemd of its own, on which the
// host's own services start on the sandbox's copies of their files.

// bootSandbox makes a booted sandbox of web, destroyed at the end, and
// waits for its systemd to be up; it returns the id and how long that
// took from the create.
func bootSandbox(t *testing.T, project string, args ...string) (string, time.Duration) {
	t.Helper()
	begin := time.Now()
	id := strings.TrimSpace(ok(t, append(append([]string{"create", "--quiet", "--boot"}, args...), project)...))
	t.Cleanup(func() { ctl(t, "", "destroy", id) })
	state := ""
	for time.Since(begin) < 20*time.Second {
		out, _, _ := ctl(t, "", "exec", id, "--", "systemctl", "is-system-running")
		if state = strings.TrimSpace(out); state == "running" || state == "degraded" {
			return id, time.Since(begin)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("booted sandbox %s: systemctl is-system-running says %q after 20 s", id, state)
	return "", 0
}

// rootSh runs script in sandbox id as its root.
func rootSh(t *testing.T, id, script string) string {
	t.Helper()
	return ok(t, "exec", "--root", id, "--", "sh", "-c", script)
}

// hostListens reports whether something listens on TCP port on the host.
func hostListens(t *testing.T, port string) bool {
	t.Helper()
	out := testbed.MustRun(t, "ss", "-Htln", "sport = :"+port)
	return strings.TrimSpace(out) != ""
}

var systemRow = regexp.MustCompile(`(?m)^System:\s+(\S+) \((no failed units|failed: (.*))\)$`)

// statusSystem is what `sandboxctl status` shows of a booted sandbox's
// systemd: its state and failed units ("none").
func statusSystem(t *testing.T, id string) (string, string) {
	t.Helper()
	out := ok(t, "status", id)
	m := systemRow.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("sandboxctl status %s has no System line:\n%s", id, out)
	}
	if m[3] == "" {
		return m[1], "none"
	}
	return m[1], m[3]
}

// The host's nginx, from its own unit file and /etc/nginx, runs in a
// booted sandbox on the sandbox's network: a command reaches it, its pid
// file names the pid the sandbox's systemd has, and nothing listens on the
// host. A unit that fails shows in status; after `systemctl poweroff`
// inside, the sandbox still answers exec and says its system is offline.
func TestABootedSandboxRunsTheHostsNginx(t *testing.T) {
	install(t)
	if _, err := os.Stat("/usr/sbin/nginx"); err != nil {
		t.Fatalf("nginx is not installed on the host (tests/install-deps.sh installs nginx-light): %v", err)
	}
	if hostListens(t, "80") {
		t.Fatal("something listens on the host's port 80 before the test: the check below would mean nothing")
	}
	id, took := bootSandbox(t, "web")
	t.Logf("create --boot to a running systemd: %v", took)
	if state, failed := statusSystem(t, id); state != "running" || failed != "none" {
		t.Errorf("status of a fresh booted sandbox: System %q, Failed units %q; want running and none", state, failed)
	}

	rootSh(t, id, "systemctl start nginx")
	page := rootSh(t, id, "curl -s http://127.0.0.1/")
	if !strings.Contains(page, "nginx") {
		t.Errorf("nginx in the sandbox answered %q; want its welcome page", page)
	}
	pids := strings.Fields(rootSh(t, id, "cat /run/nginx.pid; systemctl show -P MainPID nginx"))
	if len(pids) != 2 || pids[0] != pids[1] {
		t.Errorf("/run/nginx.pid and systemd's MainPID of nginx: %q; want the same pid (commands see the system's pids)", pids)
	}
	if hostListens(t, "80") {
		t.Error("nginx started in a sandbox listens on the host's port 80")
	}
	if out, _ := exec.Command("systemctl", "is-active", "nginx.service").Output(); strings.TrimSpace(string(out)) == "active" {
		t.Error("the host's nginx.service became active")
	}

	// A unit that fails is listed.
	ctl(t, "", "exec", "--root", id, "--", "systemd-run", "--unit=boot-test-fails", "--wait", "/bin/false")
	if state, failed := statusSystem(t, id); state != "degraded" || !strings.Contains(failed, "boot-test-fails.service") {
		t.Errorf("status after a unit failed: System %q, Failed units %q; want degraded and boot-test-fails.service", state, failed)
	}

	// systemd ends; the sandbox does not.
	ctl(t, "", "exec", "--root", id, "--", "systemctl", "poweroff")
	deadline := time.Now().Add(10 * time.Second)
	state := ""
	for time.Now().Before(deadline) {
		if state, _ = statusSystem(t, id); state == "offline" {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if state != "offline" {
		t.Errorf("status after systemctl poweroff: System %q; want offline", state)
	}
	if got := strings.TrimSpace(ok(t, "exec", id, "--", "echo", "still here")); got != "still here" {
		t.Errorf("exec after the sandbox's systemd ended: %q", got)
	}

	// Its cgroups, the systemd's delegated subtree too, go with it.
	scopes := func() string {
		return testbed.MustRun(t, "find", "/sys/fs/cgroup", "-type", "d", "-name", "*"+id+"*")
	}
	if strings.TrimSpace(scopes()) == "" {
		t.Fatal("found no cgroup of the sandbox while it lives: the check below would prove nothing")
	}
	ok(t, "destroy", id)
	if left := strings.TrimSpace(scopes()); left != "" {
		t.Errorf("cgroups left after destroy:\n%s", left)
	}
}

// A service's root holds every capability of its systemd's user namespace,
// and uses them (it mounts and unmounts its own tmpfs), yet cannot unmount
// what the sandbox hides from it: the init's mounts are locked there.
func TestABootedSandboxsServicesCannotUncoverHiddenPaths(t *testing.T) {
	install(t)
	id, _ := bootSandbox(t, "web")
	out := rootSh(t, id, `systemd-run --quiet --wait --pipe --collect sh -c '
		mount -t tmpfs probe /mnt && echo mounted-own && umount /mnt && echo unmounted-own
		for p in /etc/shadow /root /var/log /etc/ssh; do umount "$p" 2>/dev/null && echo "uncovered $p"; done
		echo "shadow $(wc -c </etc/shadow)"'`)
	if !strings.Contains(out, "mounted-own") || !strings.Contains(out, "unmounted-own") {
		t.Fatalf("a service could not mount and unmount a tmpfs of its own (%q): the check below would prove nothing", out)
	}
	if strings.Contains(out, "uncovered") {
		t.Errorf("a service unmounted a hidden path: %q", out)
	}
	if !strings.Contains(out, "shadow 0") {
		t.Errorf("a service read the host's /etc/shadow: %q", out)
	}
}

// Where its systemd would not be contained, a booted sandbox is refused
// with the reason, and nothing is made.
func TestABootedSandboxOnTheHostsNetworkIsRefused(t *testing.T) {
	install(t)
	before := listedIDs(t)
	fails(t, 2, "network of its own", "create", "--boot", "--network", "host", "web")
	if after := listedIDs(t); len(after) != len(before) {
		t.Errorf("sandboxes before the refused create: %v; after: %v", before, after)
	}
}
