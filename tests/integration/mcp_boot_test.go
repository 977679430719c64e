package integration

import (
	"os"
	"slices"
	"strings"
	"testing"
)

// Issue 18's boot through the MCP server, as an agent would use it:
// sandbox_create with boot, system_status until its systemd is up, the
// host's nginx started with exec as root and reached inside.

type mcpSystem struct {
	State  string   `json:"state"`
	Failed []string `json:"failed"`
}

// TestMCPBootedSandboxRunsTheHostsNginx: a booted sandbox made by the
// tool says boot in its status; system_status says running once it is
// up; nginx, refused before it is started, serves its page after
// `systemctl start nginx`; a unit that fails turns the system degraded
// and is named.
func TestMCPBootedSandboxRunsTheHostsNginx(t *testing.T) {
	install(t)
	if _, err := os.Stat("/usr/sbin/nginx"); err != nil {
		t.Fatalf("nginx is not installed on the host (tests/install-deps.sh installs nginx-light): %v", err)
	}
	cs, _, _ := mcpSession(t)
	var sb struct {
		ID   string `json:"id"`
		Boot bool   `json:"boot"`
	}
	toolOK(t, cs, "sandbox_create", map[string]any{"project": "web", "boot": true}, &sb)
	t.Cleanup(func() { ctl(t, "", "destroy", sb.ID) })
	if !sb.Boot {
		t.Errorf("sandbox_create with boot: its status says boot %v", sb.Boot)
	}

	var sys mcpSystem
	waitFor(t, "system_status to say running or degraded", func() bool {
		toolOK(t, cs, "system_status", map[string]any{"sandbox": sb.ID}, &sys)
		return sys.State == "running" || sys.State == "degraded"
	})
	if sys.State != "running" || len(sys.Failed) != 0 {
		t.Errorf("system_status of a fresh booted sandbox: %+v; want running and no failed unit", sys)
	}

	curl := map[string]any{"sandbox": sb.ID, "root": true, "command": []string{"curl", "-s", "http://127.0.0.1/"}}
	var run mcpExec
	toolOK(t, cs, "exec", curl, &run)
	if run.ExitCode == 0 {
		t.Fatalf("curl reached a server in the sandbox before nginx was started (%+v): the check below would prove nothing", run)
	}
	toolOK(t, cs, "exec", map[string]any{"sandbox": sb.ID, "root": true, "command": []string{"systemctl", "start", "nginx"}}, &run)
	if run.ExitCode != 0 {
		t.Fatalf("exec systemctl start nginx as root: %+v", run)
	}
	toolOK(t, cs, "exec", curl, &run)
	if run.ExitCode != 0 || !strings.Contains(run.Stdout, "nginx") {
		t.Errorf("curl of nginx in the booted sandbox: %+v; want its welcome page", run)
	}

	toolOK(t, cs, "exec", map[string]any{"sandbox": sb.ID, "root": true,
		"command": []string{"systemd-run", "--unit=mcp-boot-fails", "--wait", "/bin/false"}}, &run)
	toolOK(t, cs, "system_status", map[string]any{"sandbox": sb.ID}, &sys)
	if sys.State != "degraded" || !slices.Contains(sys.Failed, "mcp-boot-fails.service") {
		t.Errorf("system_status after a unit failed: %+v; want degraded and mcp-boot-fails.service", sys)
	}
}

// system_status of a sandbox made without boot is a tool error that says
// so and what to do, not a state.
func TestMCPSystemStatusOfASandboxNotBooted(t *testing.T) {
	install(t)
	cs, _, _ := mcpSession(t)
	var sb struct {
		ID   string `json:"id"`
		Boot bool   `json:"boot"`
	}
	toolOK(t, cs, "sandbox_create", map[string]any{"project": "web", "network": "none"}, &sb)
	t.Cleanup(func() { ctl(t, "", "destroy", sb.ID) })
	if sb.Boot {
		t.Errorf("sandbox_create without boot: its status says boot")
	}
	toolFails(t, cs, "system_status", map[string]any{"sandbox": sb.ID},
		sb.ID+`[^\n]*not created with boot[^\n]*\n\(make a sandbox with sandbox_create and boot true`)
	toolFails(t, cs, "system_status", map[string]any{"sandbox": "no-such-sandbox"}, `no-such-sandbox[^\n]*\n\(sandbox_list lists`)
}
