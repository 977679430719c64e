package integration

import (
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/tests/testbed"
)

// TestHostileRefusalFloodLeavesTheDaemonsOwnWarnings: the journal's
// budget (issue 28, finding 10) gave all the warnings without a caller
// one budget of 10 a minute: the daemon's own (a promotion that failed,
// the audit log that could not be written) and those anyone may cause
// (the guard's refusals, which name only a bus sender; a port's refused
// connections). A member's calls that the guard refuses, 10 a minute,
// left the daemon's own warnings out of the journal. They have budgets
// of their own now, and the daemon's lines none.
func TestHostileRefusalFloodLeavesTheDaemonsOwnWarnings(t *testing.T) {
	const member, project = "hostile-flood", "flood"
	groupMember(t, member)
	addProject(t, project, map[string]string{"check.sh": "grep -q good app.txt\n", "app.txt": "v1\n"})
	reconfigure(t, promoteStages) // a fresh daemon: its budgets anew
	since := time.Now().Add(-time.Second).Format("2006-01-02 15:04:05")

	// The member's flood, kept up until the promotion below has ended:
	// calls the guard refuses (a path longer than it takes).
	long := strings.Repeat("a", 5000)
	refuse := func() string {
		out, _ := exec.Command("setpriv", "--reuid="+member, "--regid="+member, "--init-groups",
			"busctl", "call", "org.sandboxd1", "/org/sandboxd1/sandbox/0", "org.sandboxd1.Sandbox", "ReadFile", "stt", long, "0", "0").CombinedOutput()
		return string(out)
	}
	// The control: the guard refuses it.
	if out := refuse(); !strings.Contains(out, "holds 5000 bytes") && !strings.Contains(out, "5000") {
		t.Fatalf("the member's call was not refused by the guard (%q): the check below would prove nothing", out)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
				refuse()
			}
		}
	}()
	defer func() { close(stop); wg.Wait() }()

	// Root's promotion, whose check fails: the daemon warns "promotion
	// failed", a line of its own (no caller).
	id := strings.TrimSpace(ok(t, "create", "--quiet", project))
	ok(t, "exec", id, "--", "sh", "-c", "echo bad > app.txt")
	if _, _, code := ctl(t, "", "promote", id); code != 1 {
		t.Fatalf("promoting a change that fails its check: exit %d, want 1", code)
	}
	var journal string
	for end := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		testbed.MustRun(t, "journalctl", "--sync")
		journal = testbed.MustRun(t, "journalctl", "--no-pager", "-o", "cat", "-u", "sandboxd.service", "--since", since)
		if strings.Contains(journal, "promotion failed") || time.Now().After(end) {
			break
		}
	}
	refusals := strings.Count(journal, "refused a D-Bus call")
	t.Logf("the journal since the daemon's start: %d lines, %d of them the guard's refusals", strings.Count(journal, "\n"), refusals)
	if refusals < 10 {
		t.Fatalf("%d of the member's refusals in the journal, fewer than the budget's 10: the flood did not spend it, the check below would prove nothing", refusals)
	}
	if !strings.Contains(journal, "promotion failed") {
		t.Errorf("the daemon's own warning of a failed promotion is not in the journal 60 s after it, while a member's calls were refused")
	}
}
