package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/sandboxd1"
)

// status names the sandbox's real owner: a member's sandbox shows the
// member, root's shows root (the Owner property is a "u"; read as a "t"
// it was 0, root, for every sandbox).
func TestHouseStatusNamesTheOwner(t *testing.T) {
	accessUsers(t)
	reconfigure(t, "") // the daemon resolves group sandboxd at its start
	path := accessProject(t, "house-owner", accAlice+":"+accAlice, 0o755, map[string]os.FileMode{"readme": 0o644})
	ok(t, "project", "add", "house-owner", path) // alice's: she owns its directory
	t.Cleanup(func() { ctl(t, "", "project", "remove", "house-owner") })
	accDestroyAtEnd(t, "house-owner")

	// The control: root's own sandbox is root's.
	mine := strings.TrimSpace(ok(t, "-q", "create", "house-owner"))
	owner := regexp.MustCompile(`(?m)^Owner:\s+(\S+)$`)
	if m := owner.FindStringSubmatch(ok(t, "status", mine)); m == nil || m[1] != "root" {
		t.Errorf("status of root's sandbox: owner %v; want root", m)
	}

	alices := strings.TrimSpace(accOK(t, accAlice, "-q", "create", "house-owner"))
	for who, out := range map[string]string{
		"root":   ok(t, "status", alices),
		accAlice: accOK(t, accAlice, "status", alices),
	} {
		if m := owner.FindStringSubmatch(out); m == nil || m[1] != accAlice {
			t.Errorf("status of %s's sandbox, asked by %s: owner %v; want %s:\n%s", accAlice, who, m, accAlice, out)
		}
	}
	var list []struct {
		ID    string
		Owner uint32
	}
	listJSON(t, &list)
	for _, s := range list {
		if s.ID == alices && fmt.Sprint(s.Owner) != accUID(t, accAlice) {
			t.Errorf("list --json: %s's owner is %d; want %s", alices, s.Owner, accUID(t, accAlice))
		}
	}
}

// A MemoryMax below the floor is refused by the daemon, whoever asks
// (sandboxctl, busctl, Try), in words that say the least; at the floor a
// sandbox runs commands.
func TestHouseMemoryBelowTheFloorIsRefused(t *testing.T) {
	install(t)
	before := listedIDs(t)
	fails(t, 2, `MemoryMax is 12 bytes, below the least a sandbox can run with, 16MiB`, "create", "--memory", "12", "web")
	fails(t, 2, `below the least a sandbox can run with`, "create", "--memory", "15M", "web")
	out, err := exec.Command("busctl", "call", "org.sandboxd1", "/org/sandboxd1", "org.sandboxd1.Manager", "CreateSandbox",
		"sa{sv}", "web", "1", "MemoryMax", "t", "12").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "below the least a sandbox can run with") {
		t.Errorf("CreateSandbox with MemoryMax 12 over the bus: %v, %q; want a refusal", err, out)
	}
	fails(t, 2, `below the least a sandbox can run with`, "try", "web", "--memory", "12", "--check", "true", "--variant", "true")
	if after := listedIDs(t); len(after) != len(before) {
		t.Errorf("refused creates left sandboxes: %v, before %v", after, before)
	}

	// At the floor, the init starts and a shell runs.
	id := strings.TrimSpace(ok(t, "-q", "create", "--memory", sandboxd1.MinMemoryMax.String(), "web"))
	t.Cleanup(func() { ctl(t, "", "destroy", id) })
	if got := ok(t, "exec", id, "--", "sh", "-c", "echo ran; ls / >/dev/null"); got != "ran\n" {
		t.Errorf("a command in a sandbox at the floor: %q", got)
	}
	status := ok(t, "status", id)
	t.Logf("$ sandboxctl status %s (MemoryMax %s)\n%s", id, sandboxd1.MinMemoryMax, status)
}

// listJSON reads `sandboxctl list --json` into v.
func listJSON(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(ok(t, "list", "--json")), v); err != nil {
		t.Fatal(err)
	}
}
