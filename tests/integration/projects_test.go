package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/tests/testbed"
)

// manager runs one busctl call of the manager, logging it as a session.
func manager(t *testing.T, args ...string) (string, error) {
	t.Helper()
	argv := append([]string{"busctl", "call", "org.sandboxd1", "/org/sandboxd1", "org.sandboxd1.Manager"}, args...)
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	t.Logf("$ %s\n%s", strings.Join(argv, " "), out)
	return string(out), err
}

func mustManager(t *testing.T, args ...string) string {
	t.Helper()
	out, err := manager(t, args...)
	if err != nil {
		t.Fatalf("busctl call ... %s: %v", strings.Join(args, " "), err)
	}
	return out
}

// A sysadmin adds a project with busctl; it outlives the daemon's restart,
// takes named sandboxes, and comes off once they are gone; the audit log
// and the journal have both changes.
func TestAProjectAddedOverTheBusOutlivesARestart(t *testing.T) {
	tb := install(t)
	path := filepath.Join(tb.Btrfs.Mount, "api")
	testbed.MustRun(t, "btrfs", "subvolume", "create", path)
	t.Cleanup(func() { _ = exec.Command("btrfs", "subvolume", "delete", path).Run() })
	if err := os.WriteFile(filepath.Join(path, "index.html"), []byte("<h1>api</h1>\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	mustManager(t, "AddProject", "ss", "api", path)
	both := fmt.Sprintf("a(sss) 2 \"api\" %q \"added\" \"web\" %q \"config\"\n", path, tb.Btrfs.Project)
	if out := mustManager(t, "ListProjects"); out != both {
		t.Fatalf("ListProjects = %q; want %q", out, both)
	}
	testbed.MustRun(t, "systemctl", "restart", "sandboxd.service")
	if out := mustManager(t, "ListProjects"); out != both {
		t.Fatalf("ListProjects after a restart = %q; want %q", out, both)
	}

	out := mustManager(t, "CreateSandbox", "sa{sv}", "api", "1", "Name", "s", "agent-1")
	m := createdRe.FindStringSubmatch(strings.TrimSpace(out))
	if m == nil {
		t.Fatalf("CreateSandbox answered %q", out)
	}
	id, object := m[1], m[2]
	if got := property(t, object, "Name"); got != "agent-1" {
		t.Fatalf("Name = %q; want agent-1", got)
	}
	if data, err := os.ReadFile(filepath.Join(property(t, object, "Path"), "index.html")); err != nil || string(data) != "<h1>api</h1>\n" {
		t.Fatalf("the sandbox's index.html: %q, %v", data, err)
	}
	if out := mustManager(t, "ListSandboxes"); !strings.Contains(out, fmt.Sprintf(`"%s" "agent-1" "api" "ready" 0 `, id)) {
		t.Fatalf("ListSandboxes = %q; want %s named agent-1, of api", out, id)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"CreateSandbox", "sa{sv}", "web", "1", "Name", "s", "agent-1"},
			`Call failed: creating a sandbox of web: a sandbox named "agent-1" exists; pick another name or destroy it`},
		{[]string{"RemoveProject", "s", "api"},
			`Call failed: removing project "api": 1 sandboxes of project "api" exist; destroy them first`},
		{[]string{"RemoveProject", "s", "web"},
			`Call failed: removing project "web": project "web" is defined in sandboxd.toml; remove it there`},
		{[]string{"AddProject", "ss", "tmp", "/tmp"},
			`Call failed: adding project "tmp": /tmp is not a volume of the pool`},
	} {
		if out, err := manager(t, tc.args...); err == nil || !strings.HasPrefix(out, tc.want) {
			t.Errorf("busctl call ... %s: %v, %q; want a failure saying %q", strings.Join(tc.args, " "), err, out, tc.want)
		}
	}

	mustManager(t, "DestroySandbox", "s", id)
	mustManager(t, "RemoveProject", "s", "api")
	web := fmt.Sprintf("a(sss) 1 \"web\" %q \"config\"\n", tb.Btrfs.Project)
	if out := mustManager(t, "ListProjects"); out != web {
		t.Fatalf("ListProjects after RemoveProject = %q; want %q", out, web)
	}
	if _, err := os.Stat(filepath.Join(path, "index.html")); err != nil {
		t.Fatalf("the removed project's files: %v", err)
	}

	audit, err := os.ReadFile("/var/log/sandboxd/audit.log")
	if err != nil {
		t.Fatal(err)
	}
	for _, action := range []string{"project-add", "project-remove"} {
		want := fmt.Sprintf(`"caller_uid":0,"action":%q,"project":"api","result":"ok"`, action)
		if !strings.Contains(string(audit), want) {
			t.Errorf("the audit log has no %s of api by uid 0:\n%s", action, audit)
		}
	}
	journal := testbed.MustRun(t, "journalctl", "--no-pager", "-o", "cat", "PROJECT=api")
	for _, want := range []string{"ACTION=AddProject", "ACTION=RemoveProject", "project added", "project removed"} {
		if !strings.Contains(journal, want) {
			t.Errorf("journalctl PROJECT=api has no %q:\n%s", want, journal)
		}
	}
}
