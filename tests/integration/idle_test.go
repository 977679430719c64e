package integration

import (
	"strings"
	"testing"
	"time"
)

// An idle sandbox is frozen after [limits] idle_freeze, and the next
// command thaws it; one running a background process is not idle; one a
// caller froze stays frozen.
func TestIdleSandboxesFreezeAndThaw(t *testing.T) {
	install(t)
	reconfigure(t, "[limits]\nidle_freeze = \"2s\"\n")
	idle := sandbox(t)
	working := sandbox(t)
	ok(t, "run", "--detach", working, "--", "sleep", "600")
	held := sandbox(t)
	ok(t, "freeze", held)

	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(ok(t, "status", idle), "frozen (idle") {
		if time.Now().After(deadline) {
			t.Fatalf("the idle sandbox is not frozen 20s on: %s", ok(t, "status", idle))
		}
		time.Sleep(200 * time.Millisecond)
	}
	if st := strings.TrimSpace(ok(t, "--quiet", "status", working)); st != "ready" && st != "running" {
		t.Errorf("a sandbox running a background process: %s; want it not frozen", st)
	}
	// The next command thaws it, and runs.
	if out := ok(t, "exec", idle, "--", "echo", "awake"); out != "awake\n" {
		t.Errorf("a command in an idle-frozen sandbox: %q", out)
	}
	if st := strings.TrimSpace(ok(t, "--quiet", "status", idle)); st == "frozen" {
		t.Errorf("the sandbox is still frozen after a command")
	}
	// A caller's freeze is not the daemon's to undo.
	fails(t, 5, `it is frozen`, "exec", held, "--", "true")
	if !strings.Contains(ok(t, "status", held), "State:") || strings.Contains(ok(t, "status", held), "idle") {
		t.Errorf("a sandbox its caller froze shows as idle: %s", ok(t, "status", held))
	}
	ok(t, "thaw", held)
}
