package integration

import (
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// approveOnTerminal runs `sandboxctl approve pid` on a terminal (its
// stdin, stdout and stderr), answers the question with answer, and
// returns what it showed and its exit status.
func approveOnTerminal(t *testing.T, pid, answer string) (string, int) {
	t.Helper()
	m, s := openPTY(t)
	defer m.Close()
	cmd := exec.Command(ctlBin(), "approve", pid)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = s, s, s
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s.Close()
	// The terminal holds the line until sandboxctl reads it.
	if _, err := io.WriteString(m, answer+"\n"); err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(m) // EIO once sandboxctl is gone
	err := cmd.Wait()
	if _, exited := err.(*exec.ExitError); err != nil && !exited {
		t.Fatalf("sandboxctl approve %s on a terminal: %v", pid, err)
	}
	return string(out), cmd.ProcessState.ExitCode()
}

// digestOf is promotion pid's digest, as its record says.
func digestOf(t *testing.T, pid string) string {
	t.Helper()
	var p struct{ Digest string }
	if err := json.Unmarshal([]byte(ok(t, "--json", "promotions", pid)), &p); err != nil || p.Digest == "" {
		t.Fatalf("promotion %s's record: %v, digest %q", pid, err, p.Digest)
	}
	return p.Digest
}

// TestApproverSeesWhatHeApproves: a stage waits for an admin. The
// approver reads each waiting change as a diff with its digest; two
// different edits of one file have different digests; an approval that
// names a digest other than the promotion's is refused and changes
// nothing; approve refuses to go on without a terminal or --yes, and on
// a terminal shows the change before it asks; what is applied is the
// frozen change, not what the sandbox wrote since. The audit log's
// waiting line names who asked for the promotion.
func TestApproverSeesWhatHeApproves(t *testing.T) {
	path := addProject(t, "approver", map[string]string{"calc.py": "def add(a, b):\n    return a - b\n"})
	reconfigure(t, "\n[[stage]]\nname = \"project\"\ntarget = \"project\"\napproval = \"admin\"\n")
	calc := func() string {
		data, err := os.ReadFile(filepath.Join(path, "calc.py"))
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	before := calc()

	one := strings.TrimSpace(ok(t, "create", "--quiet", "approver"))
	two := strings.TrimSpace(ok(t, "create", "--quiet", "approver"))
	ok(t, "exec", one, "--", "sh", "-c", "sed -i 's/a - b/a + b/' calc.py")
	ok(t, "exec", two, "--", "sh", "-c", "sed -i 's/a - b/b + a/' calc.py")
	out := ok(t, "promote", one)
	if !strings.Contains(out, "1 change: modified calc.py") || !strings.Contains(out, "waiting") {
		t.Fatalf("promote through an admin's stage: want it waiting, saying what changed:\n%s", out)
	}
	p1 := promotionIDRe.FindStringSubmatch(out)[1]
	p2 := promotionIDRe.FindStringSubmatch(ok(t, "promote", two))[1]
	d1, d2 := digestOf(t, p1), digestOf(t, p2)
	if d1 == d2 {
		t.Fatalf("two different edits of calc.py (of the same size) have the same digest %s", d1)
	}
	// The sandbox writes on after its promotion: not part of it.
	ok(t, "exec", one, "--", "sh", "-c", "echo 'later' >> calc.py")

	// What the approver reads: both changes, each with its digest.
	diff := ok(t, "promotions", "--diff")
	for _, want := range []string{
		"promotion " + p1, "-    return a - b", "+    return a + b", "digest " + d1,
		"promotion " + p2, "+    return b + a", "digest " + d2, "1 change: modified calc.py",
		"sandboxctl approve " + p1 + " --yes --digest " + d1,
	} {
		if !strings.Contains(diff, want) {
			t.Errorf("promotions --diff has no %q:\n%s", want, diff)
		}
	}
	if strings.Contains(diff, "later") {
		t.Errorf("promotions --diff shows what the sandbox wrote after its promotion:\n%s", diff)
	}
	if out := ok(t, "promotions", p1); !strings.Contains(out, "1 change: modified calc.py") {
		t.Errorf("promotions %s does not say what changed:\n%s", p1, out)
	}

	// No terminal, no --yes: refused, saying what to do.
	stdout, stderr, code := ctl(t, "", "approve", p1)
	if code != 2 || !strings.Contains(stderr, "--yes") || !strings.Contains(stderr, "promotions --diff") {
		t.Errorf("approve without a terminal or --yes: exit %d; want 2 saying to pass --yes after promotions --diff:\n%s%s", code, stdout, stderr)
	}
	// The digest of the other change: refused, nothing applied.
	stdout, stderr, code = ctl(t, "", "approve", p2, "--yes", "--digest", d1)
	if code != 5 || !strings.Contains(stderr, "the change differs from what you saw") || !strings.Contains(stderr, "promotions --diff") {
		t.Errorf("approve naming another change's digest: exit %d; want 5, the change differs:\n%s%s", code, stdout, stderr)
	}
	if got := calc(); got != before {
		t.Fatalf("the project's calc.py after refused approvals: %q; want %q", got, before)
	}
	if p := promotionRecord(t, p2); p.State != "waiting" {
		t.Errorf("the promotion after a refused approval is %s; want waiting", p.State)
	}

	// On a terminal: the change, then the question; no is no.
	shown, code := approveOnTerminal(t, p2, "n")
	if code != 1 || !strings.Contains(shown, "+    return b + a") || !strings.Contains(shown, "[y/N]") {
		t.Errorf("approve on a terminal answered no: exit %d; want 1, the diff shown before the question:\n%s", code, shown)
	}
	if i, j := strings.Index(shown, "+    return b + a"), strings.Index(shown, "[y/N]"); i > j {
		t.Errorf("approve asked before it showed the change:\n%s", shown)
	}
	if got := calc(); got != before {
		t.Fatalf("the project's calc.py after a no: %q", got)
	}
	// Yes: the frozen change is applied, not what the sandbox wrote since.
	shown, code = approveOnTerminal(t, p1, "y")
	if code != 0 || !strings.Contains(shown, "+    return a + b") || !strings.Contains(shown, "passed") {
		t.Errorf("approve on a terminal answered yes: exit %d:\n%s", code, shown)
	}
	if got, want := calc(), "def add(a, b):\n    return a + b\n"; got != want {
		t.Errorf("the project's calc.py after the approval: %q; want %q", got, want)
	}
	ok(t, "reject", p2, "--reason", "the other fix won")

	// The audit log's waiting line names the requester (root: uid 0).
	audit, err := os.ReadFile("/var/log/sandboxd/audit.log")
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, l := range strings.Split(string(audit), "\n") {
		var e struct {
			Action    string
			CallerUID *uint32 `json:"caller_uid"`
			Promotion *struct{ ID string }
		}
		if json.Unmarshal([]byte(l), &e) != nil || e.Action != "promote-waiting" || e.Promotion == nil || e.Promotion.ID != p1 {
			continue
		}
		found = true
		if e.CallerUID == nil || *e.CallerUID != 0 {
			t.Errorf("the audit log's promote-waiting line names caller %v; want the requester, uid 0:\n%s", e.CallerUID, l)
		}
	}
	if !found {
		t.Errorf("the audit log has no promote-waiting line of promotion %s", p1)
	}
}

// TestPromoteWithNothingChangedSaysSo: a sandbox that changed nothing
// has nothing to promote: said, exit 0, and no failed promotion recorded.
func TestPromoteWithNothingChangedSaysSo(t *testing.T) {
	addProject(t, "unchanged", map[string]string{"a.txt": "a\n"})
	reconfigure(t, "")
	id := strings.TrimSpace(ok(t, "create", "--quiet", "--name", "idle-one", "unchanged"))
	count := func() int {
		var list []json.RawMessage
		if err := json.Unmarshal([]byte(ok(t, "--json", "promotions")), &list); err != nil {
			t.Fatal(err)
		}
		return len(list)
	}
	n := count()
	stdout, stderr, code := ctl(t, "", "promote", id)
	if code != 0 || !strings.Contains(stdout, "nothing to promote: sandbox idle-one has no changes") {
		t.Errorf("promote with nothing changed: exit %d; want 0, saying there is nothing to promote:\n%s%s", code, stdout, stderr)
	}
	if got := count(); got != n {
		t.Errorf("promote with nothing changed recorded a promotion: %d promotions, were %d:\n%s", got, n, ok(t, "promotions"))
	}
}
