package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/tests/testbed"
)

// TestHostilePromotionCheckDoesNotHoldOthersCreates is issue 28's finding
// 8, as two members of group sandboxd would meet it: A promotes a change
// whose check blocks (on a fifo the test opens, standing for a check that
// takes its check_timeout); meanwhile B creates a sandbox of the same
// project. B's create ends while A's check still runs, and B's sandbox
// holds the project as it was before A's change (the stage's rollback
// point), never a state that is then rolled back. Then A's check passes
// (the project has A's change) or, the second time, fails (the project
// is rolled back to the first change), and B's sandboxes stay as made.
func TestHostilePromotionCheckDoesNotHoldOthersCreates(t *testing.T) {
	const memberA, memberB, project = "gate-a", "gate-b", "hostile-gate"
	groupMember(t, memberA)
	groupMember(t, memberB)
	tb := install(t)
	path := filepath.Join(tb.Btrfs.Mount, project)
	_ = exec.Command("btrfs", "subvolume", "delete", path).Run() // what a failed run left
	testbed.MustRun(t, "btrfs", "subvolume", "create", path)
	t.Cleanup(func() { _ = exec.Command("btrfs", "subvolume", "delete", path).Run() })
	// The check makes a fifo in its sandbox's copy of the project (gate/,
	// writable by all) and passes if the test writes "pass" into it.
	files := map[string]string{
		"app.txt":  "v1\n",
		"check.sh": "mkfifo gate/release.fifo && read verdict < gate/release.fifo && [ \"$verdict\" = pass ]\n",
	}
	if err := os.Mkdir(filepath.Join(path, "gate"), 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(path, "gate"), 0o777); err != nil {
		t.Fatal(err)
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(path, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	testbed.MustRun(t, "chown", "-R", memberA+":"+memberA, path) // A's project, B listed
	// check_timeout as by default: the check is held far longer than
	// B's create may take.
	stages := strings.Replace(promoteStages, `check_timeout = "1m"`, `check_timeout = "10m"`, 1)
	reconfigure(t, stages+fmt.Sprintf("[[project]]\nname = %q\npath = %q\nusers = [%q, %q]\n", project, path, memberA, memberB))
	accDestroyAtEnd(t, project)

	a := strings.TrimSpace(okAs(t, memberA, "create", "--quiet", project))
	for _, round := range []struct{ change, verdict, after string }{
		{"v2", "pass", "v2"}, // passed: the project has A's change
		{"v3", "fail", "v2"}, // failed: rolled back to what it was
	} {
		before := readProjectFile(t, path, "app.txt")
		okAs(t, memberA, "exec", a, "--", "sh", "-c", "echo "+round.change+" > app.txt")
		pid := strings.TrimSpace(okAs(t, memberA, "promote", "--no-wait", a))
		fifo := waitForCheckFifo(t, project, pid)
		// The control: A's change is in the project while its check runs,
		// so a base taken of the project now would hold it.
		if got := readProjectFile(t, path, "app.txt"); got != round.change+"\n" {
			t.Fatalf("app.txt while the check runs: %q; want A's %s", got, round.change)
		}

		// B's create, while A's check is held.
		var out, errOut bytes.Buffer
		create := exec.Command("setpriv", "--reuid="+memberB, "--regid="+memberB, "--init-groups", ctlBin(), "create", "--quiet", project)
		create.Stdout, create.Stderr = &out, &errOut
		if err := create.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- create.Wait() }()
		var cerr error
		select {
		case cerr = <-done:
		case <-time.After(time.Minute):
			t.Errorf("round %s: B's create of %s did not end within a minute while A's promotion %s checks: it waits on A's check", round.verdict, project, pid)
			release(t, fifo, round.verdict)
			cerr = <-done
			fifo = ""
		}
		if cerr != nil {
			t.Fatalf("B's create: %v: %s%s", cerr, out.String(), errOut.String())
		}
		b := strings.TrimSpace(out.String())
		if got := okAs(t, memberB, "exec", b, "--", "cat", "app.txt"); got != before {
			t.Errorf("round %s: app.txt in B's sandbox made during A's check: %q; want the project as it was before A's change, %q", round.verdict, got, before)
		}

		if fifo != "" {
			release(t, fifo, round.verdict)
		}
		p := waitForPromotionEnd(t, pid)
		if want := map[string]string{"pass": "done", "fail": "failed"}[round.verdict]; p.State != want {
			t.Errorf("round %s: promotion %s ended %s (%s); want %s", round.verdict, pid, p.State, p.Error, want)
		}
		if got := readProjectFile(t, path, "app.txt"); got != round.after+"\n" {
			t.Errorf("round %s: the project's app.txt after the promotion: %q; want %s", round.verdict, got, round.after)
		}
		if got := okAs(t, memberB, "exec", b, "--", "cat", "app.txt"); got != before {
			t.Errorf("round %s: app.txt in B's sandbox after A's promotion ended: %q; want %q", round.verdict, got, before)
		}
	}
}

func readProjectFile(t *testing.T, dir, name string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// waitForCheckFifo waits until promotion pid of project checks and its
// check sandbox's check waits on its fifo, and returns the fifo's path on
// the host.
func waitForCheckFifo(t *testing.T, project, pid string) string {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		p := promotionRecord(t, pid)
		if p.State != "running" || time.Now().After(deadline) {
			t.Fatalf("promotion %s never reached its check: %+v", pid, p)
		}
		if len(p.Stages) > 0 && p.Stages[0].State == "checking" {
			var list []struct{ ID, Name, Project string }
			if err := json.Unmarshal([]byte(ok(t, "list", "--json")), &list); err != nil {
				t.Fatal(err)
			}
			for _, s := range list {
				if s.Project == project && s.Name == "check-"+pid {
					fifo := filepath.Join(property(t, "/org/sandboxd1/sandbox/"+s.ID, "Path"), "gate", "release.fifo")
					if st, err := os.Stat(fifo); err == nil && st.Mode()&os.ModeNamedPipe != 0 {
						return fifo
					}
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// release writes verdict into the check's fifo, which its reader holds
// open already (the open waits for it otherwise).
func release(t *testing.T, fifo, verdict string) {
	t.Helper()
	if err := os.WriteFile(fifo, []byte(verdict+"\n"), 0); err != nil {
		t.Fatalf("releasing the check: %v", err)
	}
}

func waitForPromotionEnd(t *testing.T, pid string) (p struct{ State, Error string }) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if err := json.Unmarshal([]byte(ok(t, "--json", "promotions", pid)), &p); err != nil {
			t.Fatal(err)
		}
		if p.State != "running" {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("promotion %s did not end within 2 minutes", pid)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
