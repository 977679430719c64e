package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/supervisor/api/calls"
	"github.com/sandboxd/sandboxd/tests/testbed"
)

// TestHostileTriesWithNoTimeoutDoNotStarveOtherMembers is issue 28's
// finding 10 (heavy-call slots), as five members of group sandboxd would
// meet it: four members each run as many Try calls as they may
// (MaxHeavyCallsPerCaller), with no timeout, each check waiting to be
// killed: 16 calls, as many as the heavy-call slots of all users. A
// fifth member's diff of its own sandbox is still served (before, it
// waited HeavyCallWait and was refused: "16 heavy calls run for all
// users"), while each of the four still has only its own places (a
// further heavy call of one of them is refused after the wait). The
// Trys end when their callers leave, and their sandboxes go.
func TestHostileTriesWithNoTimeoutDoNotStarveOtherMembers(t *testing.T) {
	const project = "hostile-fair"
	members := []string{"fair-a", "fair-b", "fair-c", "fair-d"}
	const fifth = "fair-e"
	for _, m := range append(members, fifth) {
		groupMember(t, m)
	}
	tb := install(t)
	path := filepath.Join(tb.Btrfs.Mount, project)
	_ = exec.Command("btrfs", "subvolume", "delete", path).Run() // what a failed run left
	testbed.MustRun(t, "btrfs", "subvolume", "create", path)
	t.Cleanup(func() { _ = exec.Command("btrfs", "subvolume", "delete", path).Run() })
	if err := os.WriteFile(filepath.Join(path, "app.txt"), []byte("v1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	reconfigure(t, fmt.Sprintf("[[project]]\nname = %q\npath = %q\nusers = [%q, %q, %q, %q, %q]\n",
		project, path, members[0], members[1], members[2], members[3], fifth))
	accDestroyAtEnd(t, project)

	own := strings.TrimSpace(okAs(t, fifth, "create", "--quiet", project))

	// The Trys: each call's client is a busctl of its member's, which
	// the test kills (by pid) at the end; TimeoutUSec 0 is no timeout.
	var tries []*exec.Cmd
	t.Cleanup(func() {
		for _, c := range tries {
			_ = c.Process.Kill()
			_ = c.Wait()
		}
	})
	for _, m := range members {
		for i := range calls.MaxHeavyCallsPerCaller {
			c := exec.Command("setpriv", "--reuid="+m, "--regid="+m, "--init-groups",
				"busctl", "--system", "--timeout=3600", "call", "org.sandboxd1", "/org/sandboxd1", "org.sandboxd1.Manager", "Try",
				"sasssa{sv}", project, "1", "true", "sleep infinity", "none", "2", "Name", "s", fmt.Sprintf("%s-%d", m, i), "TimeoutUSec", "t", "0")
			if err := c.Start(); err != nil {
				t.Fatal(err)
			}
			tries = append(tries, c)
		}
	}
	// Every Try made its sandbox: each call is admitted, and holds (or
	// held) its slot.
	trySandboxes := func() []struct{ ID, Name string } {
		var list []struct{ ID, Name, Project string }
		if err := json.Unmarshal([]byte(ok(t, "list", "--json")), &list); err != nil {
			t.Fatal(err)
		}
		var out []struct{ ID, Name string }
		for _, s := range list {
			if s.Project == project && s.ID != own {
				out = append(out, struct{ ID, Name string }{s.ID, s.Name})
			}
		}
		return out
	}
	deadline := time.Now().Add(3 * time.Minute)
	for len(trySandboxes()) < len(tries) {
		if time.Now().After(deadline) {
			t.Fatalf("%d Trys made %d sandboxes within 3 minutes", len(tries), len(trySandboxes()))
		}
		time.Sleep(100 * time.Millisecond)
	}

	// The fifth member's heavy call is served.
	start := time.Now()
	out, errOut, code := ctlAs(t, fifth, "diff", own)
	took := time.Since(start)
	if code != 0 {
		t.Errorf("the fifth member's diff while the four others run %d Trys with no timeout: exit %d: %s%s", len(tries), code, out, errOut)
	}
	t.Logf("the fifth member's diff with %d Trys of four others waiting on their checks: exit %d in %v", len(tries), code, took.Round(time.Millisecond))
	// Each of the four still has only its own places.
	var firstOfA string
	for _, s := range trySandboxes() {
		if strings.HasPrefix(s.Name, members[0]+"-") {
			firstOfA = s.ID
		}
	}
	if _, errOut, code := ctlAs(t, members[0], "diff", firstOfA); code == 0 || !strings.Contains(errOut, "too many concurrent calls") {
		t.Errorf("%s's fifth heavy call while its %d Trys run: exit %d: %s; want refused as too many concurrent calls",
			members[0], calls.MaxHeavyCallsPerCaller, code, errOut)
	}

	// No timeout, but the wait ends: the callers leave, the Trys end and
	// their sandboxes go.
	for _, c := range tries {
		_ = c.Process.Kill()
		_ = c.Wait()
	}
	tries = nil
	deadline = time.Now().Add(3 * time.Minute)
	for left := trySandboxes(); len(left) > 0; left = trySandboxes() {
		if time.Now().After(deadline) {
			t.Fatalf("%d sandboxes of Trys whose callers left are still there after 3 minutes: %v", len(left), left)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
