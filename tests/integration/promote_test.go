package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/internal/crashpoint"
	"github.com/sandboxd/sandboxd/internal/treetest"
	"github.com/sandboxd/sandboxd/tests/testbed"
)

// addProject makes a btrfs subvolume with files, adds it as project name,
// and returns its path; at the end of the test its sandboxes are
// destroyed and it is removed.
func addProject(t *testing.T, name string, files map[string]string) string {
	t.Helper()
	tb := install(t)
	path := filepath.Join(tb.Btrfs.Mount, name)
	testbed.MustRun(t, "btrfs", "subvolume", "create", path)
	for file, text := range files {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(path, file)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(path, file), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ok(t, "project", "add", name, path)
	t.Cleanup(func() {
		for _, s := range sandboxIDsOf(t, name) {
			ctl(t, "", "destroy", s)
		}
		ctl(t, "", "project", "remove", name)
		_ = exec.Command("btrfs", "subvolume", "delete", path).Run()
	})
	return path
}

// sandboxIDsOf lists the ids of project's sandboxes.
func sandboxIDsOf(t *testing.T, project string) []string {
	t.Helper()
	var list []struct{ ID, Project string }
	if err := json.Unmarshal([]byte(ok(t, "list", "--json")), &list); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, s := range list {
		if s.Project == project {
			ids = append(ids, s.ID)
		}
	}
	return ids
}

// reconfigure restarts sandboxd with extra appended to the tests'
// sandboxd.toml and env in its environment; the test's end puts the
// usual configuration back.
func reconfigure(t *testing.T, extra string, env ...string) {
	t.Helper()
	tb := install(t)
	apply := func(extra string, env []string) {
		if err := os.WriteFile("/etc/sandboxd/sandboxd.toml", []byte(baseConfig(tb)+extra), 0o644); err != nil {
			t.Fatal(err)
		}
		dropIn := "/run/systemd/system/sandboxd.service.d/test-env.conf"
		if len(env) == 0 {
			_ = os.Remove(dropIn)
		} else {
			if err := os.MkdirAll(filepath.Dir(dropIn), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(dropIn, []byte("[Service]\nEnvironment="+strings.Join(env, " ")+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		testbed.MustRun(t, "systemctl", "daemon-reload")
		testbed.MustRun(t, "systemctl", "reset-failed", "sandboxd.service")
		testbed.MustRun(t, "systemctl", "restart", "sandboxd.service")
	}
	apply(extra, env)
	t.Cleanup(func() { apply("", nil) })
}

// promotionRecord reads a promotion with sandboxctl.
func promotionRecord(t *testing.T, id string) (p struct {
	ID, State, Error string
	Conflicts        []string
	Stages           []struct {
		Name, State, Error string
		Checks             []struct {
			Command, How, Output string
			Status               int
		}
	}
}) {
	t.Helper()
	if err := json.Unmarshal([]byte(ok(t, "--json", "promotions", id)), &p); err != nil {
		t.Fatal(err)
	}
	return p
}

var promotionIDRe = regexp.MustCompile(`promotion ([0-9a-f]{12})`)

const promoteStages = `
[[stage]]
name = "project"
target = "project"
checks = ["sh check.sh"]
check_timeout = "1m"
`

func TestCLIPromoteAppliesChecksAndRefusesConflicts(t *testing.T) {
	path := addProject(t, "promo", map[string]string{
		"check.sh":  "grep -q 'VAT 20' price.txt || { echo 'price.txt does not say VAT 20' >&2; exit 1; }\n",
		"price.txt": "VAT 2\n", "lib/old.txt": "old\n",
	})
	reconfigure(t, promoteStages)

	// A sandbox made now, whose base the promotions below leave behind.
	stale := strings.TrimSpace(ok(t, "create", "--quiet", "promo"))
	// A fix that passes the check: promoted, and the project has it.
	id := strings.TrimSpace(ok(t, "create", "--quiet", "promo"))
	ok(t, "exec", id, "--", "sh", "-c", "echo 'VAT 20' > price.txt && rm lib/old.txt && mkdir -p docs && echo note > docs/NOTE")
	sandboxTree := treetest.Describe(t, property(t, "/org/sandboxd1/sandbox/"+id, "Path"))
	out := ok(t, "promote", id)
	for _, want := range []string{`stage project \(project\): applying`, `check "sh check.sh": passed`, `stage project \(project\): passed`} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("promote's output has no %q:\n%s", want, out)
		}
	}
	if got := treetest.Describe(t, path); len(treetest.Diff(got, sandboxTree)) > 0 {
		t.Fatalf("the project after the promotion:\n%v\nwant the sandbox's:\n%v", got, sandboxTree)
	}
	pid := promotionIDRe.FindStringSubmatch(out)[1]
	if p := promotionRecord(t, pid); p.State != "done" || p.Stages[0].Checks[0].Status != 0 {
		t.Fatalf("the promotion's record: %+v", p)
	}
	if list := ok(t, "promotions"); !strings.Contains(list, pid) || !strings.Contains(list, "done") {
		t.Fatalf("sandboxctl promotions:\n%s", list)
	}

	// A fix that fails the check: the stage is rolled back, exit 1, and
	// the project is as it was.
	before := treetest.Describe(t, path)
	bad := strings.TrimSpace(ok(t, "create", "--quiet", "promo"))
	ok(t, "exec", bad, "--", "sh", "-c", "echo 'VAT 200' > docs/NOTE && echo 'VAT 0' > price.txt")
	stdout, stderr, code := ctl(t, "", "promote", bad)
	if code != 1 || !strings.Contains(stdout, "FAILED") || !strings.Contains(stdout, "price.txt does not say VAT 20") || !strings.Contains(stderr, "failed") {
		t.Fatalf("promoting a change that fails its check: exit %d\n%s%s", code, stdout, stderr)
	}
	if got := treetest.Describe(t, path); len(treetest.Diff(got, before)) > 0 {
		t.Fatalf("the project after a failed check:\n%v\nwant:\n%v", got, before)
	}

	// The first sandbox promotes again after more work: its own earlier
	// change in the project is no conflict.
	ok(t, "exec", id, "--", "sh", "-c", "echo 'VAT 20.' > price.txt")
	ok(t, "promote", id)
	before = treetest.Describe(t, path)

	// A sandbox made before the first promotion that changed price.txt
	// too: a conflict, refused by name with exit 5; --force applies it.
	ok(t, "exec", stale, "--", "sh", "-c", "echo 'VAT 20 and more' > price.txt && echo x > unrelated.txt")
	fails(t, 5, `price.txt`, "promote", stale)
	if got := treetest.Describe(t, path); len(treetest.Diff(got, before)) > 0 {
		t.Fatalf("the project after a refused promotion changed")
	}
	ok(t, "promote", "--force", stale)
	if data, _ := os.ReadFile(filepath.Join(path, "price.txt")); string(data) != "VAT 20 and more\n" {
		t.Fatalf("price.txt after a forced promotion: %q", data)
	}

	// The audit log has each step, with the change set's digest and the
	// checks' results.
	audit, err := os.ReadFile("/var/log/sandboxd/audit.log")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"action":"promote-stage"`, `"command":"sh check.sh"`, `"digest":"`, `"conflicts":["price.txt"]`, `"forced":true`} {
		if !strings.Contains(string(audit), want) {
			var lines []string
			for _, l := range strings.Split(string(audit), "\n") {
				if strings.Contains(l, "promot") {
					lines = append(lines, l)
				}
			}
			t.Errorf("the audit log has no %s:\n%s", want, strings.Join(lines, "\n"))
		}
	}
}

func TestCLIDiffTextShowsUnifiedDiff(t *testing.T) {
	addProject(t, "difftext", map[string]string{"a.txt": "one\ntwo\nthree\n", "bin.dat": "x\x00y"})
	id := strings.TrimSpace(ok(t, "create", "--quiet", "difftext"))
	ok(t, "exec", id, "--", "sh", "-c", "sed -i s/two/TWO/ a.txt && printf 'z\\000' > bin.dat && echo new > b.txt")
	out := ok(t, "diff", "--text", id)
	for _, want := range []string{"--- a/a.txt\n+++ b/a.txt\n", "-two\n+TWO\n", "Binary files a/bin.dat and b/bin.dat differ", "+++ b/b.txt\n@@ -0,0 +1 @@\n+new\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("diff --text has no %q:\n%s", want, out)
		}
	}
	// A name and a text that are not UTF-8 (a D-Bus string must be) are
	// shown with U+FFFD, not a failed reply.
	ok(t, "exec", id, "--", "sh", "-c", `printf 'caf\351\n' > "$(printf 'latin\351.txt')"`)
	if out := ok(t, "diff", id); !strings.Contains(out, "A latin\uFFFD.txt") {
		t.Errorf("diff with a name that is not UTF-8:\n%s", out)
	}
	if out := ok(t, "diff", "--text", id); !strings.Contains(out, "+caf\uFFFD") {
		t.Errorf("diff --text of a text that is not UTF-8:\n%s", out)
	}
}

// TestKill9AtEachStepOfAPromotion kills the daemon at each named step of
// a promotion (crashpoint) and checks, after systemd restarted it, that
// the project holds exactly what it held before the promotion or exactly
// the promoted change, and that nothing of the promotion is left.
func TestKill9AtEachStepOfAPromotion(t *testing.T) {
	tb := install(t)
	path := addProject(t, "crash", map[string]string{
		"check.sh": "test ! -f FAIL || { echo told to fail; exit 1; }\n", "app.txt": "v1\n", "keep/k.txt": "k\n",
	})
	// The project may end "after" only where the change was complete and
	// checked: killed once the stage is recorded passed.
	wantAfter := map[string]bool{crashpoint.PromotePassed: true}
	for _, point := range crashpoint.Promotion {
		t.Run(point, func(t *testing.T) {
			reconfigure(t, promoteStages, crashpoint.Env+"="+point)
			old := mainPID(t)
			id := strings.TrimSpace(ok(t, "create", "--quiet", "crash"))
			change := "echo v2-" + point + " > app.txt && rm keep/k.txt && mkdir -p new && for i in 1 2 3 4 5 6; do echo $i > new/$i; done"
			if point == crashpoint.PromoteRollingBack {
				change += " && touch FAIL" // the check fails, the rollback starts
			}
			ok(t, "exec", id, "--", "sh", "-c", change)
			before := treetest.Describe(t, path)
			after := treetest.Describe(t, property(t, "/org/sandboxd1/sandbox/"+id, "Path"))

			ctl(t, "", "promote", id) // the daemon dies under it
			waitActive(t, old)

			got := treetest.Describe(t, path)
			switch {
			case wantAfter[point] && len(treetest.Diff(got, after)) > 0:
				t.Fatalf("killed at %s: the project is not the promoted change:\n%v\nwant:\n%v", point, got, after)
			case !wantAfter[point] && len(treetest.Diff(got, before)) > 0:
				t.Fatalf("killed at %s: the project is not as before the promotion:\n%v\nwant:\n%v", point, got, before)
			}
			var list []struct{ ID, State, Sandbox string }
			if err := json.Unmarshal([]byte(ok(t, "--json", "promotions")), &list); err != nil {
				t.Fatal(err)
			}
			for _, p := range list {
				if p.State == "running" {
					t.Fatalf("killed at %s: promotion %s still says running after the restart", point, p.ID)
				}
			}
			// The kill did happen: the restarted daemon found the
			// promotion interrupted (or, past the last step, done).
			last := promotionRecord(t, list[len(list)-1].ID)
			if wantAfter[point] && last.State != "done" ||
				!wantAfter[point] && (last.State != "failed" || !strings.Contains(last.Error, "interrupted by a restart of the daemon")) {
				t.Fatalf("killed at %s: the promotion's record after the restart: %+v", point, last)
			}
			// Nothing of the promotion is left once its sandbox is gone:
			// no volume of it, no check sandbox.
			if ids := sandboxIDsOf(t, "crash"); len(ids) != 1 || ids[0] != id {
				t.Fatalf("killed at %s: sandboxes of the project after the restart: %v; want only %s", point, ids, id)
			}
			ok(t, "destroy", id)
			entries, _ := os.ReadDir(filepath.Join(tb.Btrfs.Mount, "sandboxd"))
			for _, e := range entries {
				if strings.HasPrefix(e.Name(), "pv-") {
					t.Fatalf("killed at %s: volume %s left after the restart", point, e.Name())
				}
			}
			// The next trial starts from the project as it is now.
			if wantAfter[point] {
				t.Logf("killed at %s: the project holds the promoted change", point)
			} else {
				t.Logf("killed at %s: the project is as before", point)
			}
		})
	}
	t.Logf("%d crash points of a promotion, one kill -9 each", len(crashpoint.Promotion))
}

func TestCLIStatusSaysHowFarTheProjectMovedAndRebaseCatchesUp(t *testing.T) {
	path := addProject(t, "moving", map[string]string{"a.txt": "a\n", "b.txt": "b\n"})
	id := strings.TrimSpace(ok(t, "create", "--quiet", "moving"))
	ok(t, "exec", id, "--", "sh", "-c", "echo mine > mine.txt && echo sandbox > b.txt")
	// A read on the host is no change.
	if _, err := os.ReadFile(filepath.Join(path, "a.txt")); err != nil {
		t.Fatal(err)
	}
	if out := ok(t, "status", id); !strings.Contains(out, "Staleness: current") {
		t.Fatalf("status after a read of the project:\n%s", out)
	}
	if err := os.WriteFile(filepath.Join(path, "a.txt"), []byte("host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out := ok(t, "status", id); !strings.Contains(out, "stale: the project changed 1 path since the base was taken") || !strings.Contains(out, "(a.txt)") {
		t.Fatalf("status after the project changed:\n%s", out)
	}
	ok(t, "rebase", id)
	if out := ok(t, "exec", id, "--", "cat", "a.txt", "b.txt", "mine.txt"); out != "host\nsandbox\nmine\n" {
		t.Fatalf("the rebased sandbox's files: %q", out)
	}
	if out := ok(t, "status", id); !strings.Contains(out, "Staleness: current") {
		t.Fatalf("status after the rebase:\n%s", out)
	}
	// The project changes b.txt too: a conflict, named, exit 5.
	if err := os.WriteFile(filepath.Join(path, "b.txt"), []byte("host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fails(t, 5, `b\.txt`, "rebase", id)
	if out := ok(t, "exec", id, "--", "cat", "b.txt"); out != "sandbox\n" {
		t.Fatalf("b.txt in the sandbox after a refused rebase: %q", out)
	}
}

// TestCLIPromoteThroughStagingToProductionOverSSH promotes through three
// stages: the project, a path on this host (staging, on another btrfs
// filesystem), and production, reached over ssh (a real sshd on the
// testbed's loopback) with an admin's approval.
func TestCLIPromoteThroughStagingToProductionOverSSH(t *testing.T) {
	path := addProject(t, "shop", map[string]string{
		"check.sh": "grep -q 'VAT 20' price.txt && test ! -f FAIL\n", "price.txt": "VAT 2\n", "lib/a.txt": "a\n",
	})
	remote := testbed.SecondBtrfs(t)
	sshd := testbed.StartSSHD(t)
	staging, prod := filepath.Join(remote, "staging", "shop"), filepath.Join(remote, "prod", "shop")
	for _, d := range []string{filepath.Dir(staging), filepath.Dir(prod)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	quoted := make([]string, len(sshd.Options))
	for i, o := range sshd.Options {
		quoted[i] = fmt.Sprintf("%q", o)
	}
	reconfigure(t, fmt.Sprintf(`
[[stage]]
name = "project"
target = "project"
checks = ["sh check.sh"]
[[stage]]
name = "staging"
target = %q
[[stage]]
name = "production"
target = %q
approval = "admin"
ssh_options = [%s]
`, filepath.Join(remote, "staging", "{project}"), sshd.Target(filepath.Join(remote, "prod", "{project}")), strings.Join(quoted, ", ")))

	// First promotion: through the project and staging; production waits.
	id := strings.TrimSpace(ok(t, "create", "--quiet", "shop"))
	ok(t, "exec", id, "--", "sh", "-c", "echo 'VAT 20' > price.txt && rm lib/a.txt && mkdir -p docs && echo v1 > docs/v")
	out := ok(t, "promote", id)
	pid := promotionIDRe.FindStringSubmatch(out)[1]
	for _, want := range []string{"stage staging (" + staging + "): passed", "stage production (ssh://", "waiting for an admin's approval: sandboxctl approve " + pid} {
		if !strings.Contains(out, want) {
			t.Errorf("promote's output has no %q:\n%s", want, out)
		}
	}
	project := treetest.Describe(t, path)
	if got := treetest.Describe(t, staging); len(treetest.Diff(got, project)) > 0 {
		t.Fatalf("staging after the promotion:\n%v\nwant the project's:\n%v", got, project)
	}
	if _, err := os.Stat(prod); !os.IsNotExist(err) {
		t.Fatalf("production before its approval: %v; want it not there yet", err)
	}
	if p := promotionRecord(t, pid); p.State != "waiting" || p.Stages[2].State != "waiting" {
		t.Fatalf("the promotion before approval: %+v", p)
	}
	// Only an admin approves.
	nobody := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", ctlBin(), "approve", "--yes", pid)
	if out, _ := nobody.CombinedOutput(); nobody.ProcessState.ExitCode() != 4 {
		t.Fatalf("approve as nobody: exit %d: %s", nobody.ProcessState.ExitCode(), out)
	}
	out = ok(t, "approve", "--yes", pid)
	if !strings.Contains(out, "stage production (ssh://") || !strings.Contains(out, "passed") {
		t.Fatalf("approve's output:\n%s", out)
	}
	if got := treetest.Describe(t, prod); len(treetest.Diff(got, project)) > 0 {
		t.Fatalf("production after approval:\n%v\nwant the project's:\n%v", got, project)
	}

	// Second promotion: staging gets it (an incremental stream), an
	// admin rejects production, which stays at the first.
	prodBefore := treetest.Describe(t, prod)
	ok(t, "exec", id, "--", "sh", "-c", "echo v2 > docs/v")
	out = ok(t, "promote", id)
	pid2 := promotionIDRe.FindStringSubmatch(out)[1]
	ok(t, "reject", pid2, "--reason", "not on a Friday")
	if got := treetest.Describe(t, prod); len(treetest.Diff(got, prodBefore)) > 0 {
		t.Fatalf("production after a rejection changed:\n%v", got)
	}
	if data, _ := os.ReadFile(filepath.Join(staging, "docs/v")); string(data) != "v2\n" {
		t.Fatalf("staging after the second promotion: docs/v = %q", data)
	}
	if p := promotionRecord(t, pid2); p.State != "rejected" {
		t.Fatalf("the rejected promotion: %+v", p)
	}

	// Third: the project's check fails (the replicas' stages have none:
	// they would run outside a sandbox); the promotion stops there, and
	// staging is as it was.
	stagingBefore := treetest.Describe(t, staging)
	ok(t, "exec", id, "--", "sh", "-c", "echo v3 > docs/v && touch FAIL")
	stdout, _, code := ctl(t, "", "promote", id)
	if code != 1 || !strings.Contains(stdout, "stage project") || !strings.Contains(stdout, "FAILED") {
		t.Fatalf("a promotion whose project check fails: exit %d\n%s", code, stdout)
	}
	if got := treetest.Describe(t, staging); len(treetest.Diff(got, stagingBefore)) > 0 {
		t.Fatalf("staging after its failed check:\n%v\nwant:\n%v", got, stagingBefore)
	}
	if got := treetest.Describe(t, prod); len(treetest.Diff(got, prodBefore)) > 0 {
		t.Fatalf("production after staging failed changed")
	}
}
