package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// A sandbox that installed a local .deb (as its root) and wrote 10,000
// files is forked 3 ways: each fork has the package and the files, and
// what one writes, in its project copy and in its system layer, is its
// alone (not in the others, not in the source). The source's background
// process is named as not carried; --spawn's runs in each fork.
func TestForkCarriesAPackageAndTenThousandFiles(t *testing.T) {
	tb, _, _ := rootInsideSetup(t)
	const pkg = "sbfork-hello"
	file := "/usr/share/" + pkg + "/hello"
	debName := webDeb(t, tb, pkg, file, "issue 31's test")
	src := agentSandbox(t)
	agentShOK(t, src, true, "dpkg -i "+debName)
	agentShOK(t, src, false, "mkdir gen && cd gen && seq 1 10000 | xargs touch")
	okAs(t, rootAgent, "run", "--detach", src, "--", "sleep", "600")

	begin := time.Now()
	out, errOut, code := ctlAs(t, rootAgent, "fork", "--count", "3", "--name", "fork-a-"+suffix(), "--spawn", "exec sleep 601", src)
	if code != 0 {
		t.Fatalf("sandboxctl fork --count 3: exit %d: %s%s", code, out, errOut)
	}
	forks := strings.Fields(out)
	for _, f := range forks {
		t.Cleanup(func() { ctl(t, "", "destroy", f) })
	}
	t.Logf("fork of a sandbox with 10,000 files written, 3 ways: %v", time.Since(begin).Round(time.Millisecond))
	if len(forks) != 3 {
		t.Fatalf("sandboxctl fork --count 3 printed %q; want 3 ids", out)
	}
	if !strings.Contains(errOut, "not carried") || !strings.Contains(errOut, "sleep 600") {
		t.Errorf("sandboxctl fork's stderr %q: want the source's background process (sleep 600) named as not carried", errOut)
	}
	for i, f := range forks {
		if got := agentShOK(t, f, false, "dpkg -s "+pkg+" | grep Status; cat "+file+"; ls gen | wc -l"); got != "Status: install ok installed\nhello from a package\n10000\n" {
			t.Errorf("fork %d (%s): the package's status, its file and the files counted: %q", i+1, f, got)
		}
		if ps := okAs(t, rootAgent, "ps", f); !strings.Contains(ps, "sleep 601") || strings.Contains(ps, "sleep 600") {
			t.Errorf("fork %d (%s)'s background processes:\n%s\nwant --spawn's sleep 601, not the source's sleep 600", i+1, f, ps)
		}
		agentShOK(t, f, true, fmt.Sprintf("echo %d > gen/1 && echo %d > %s && rm gen/2", i+1, i+1, file))
	}
	for i, f := range forks {
		want := fmt.Sprintf("%d\n%d\n9999\n", i+1, i+1)
		if got := agentShOK(t, f, false, "cat gen/1 "+file+"; ls gen | wc -l"); got != want {
			t.Errorf("fork %d (%s) after each fork wrote its own: %q; want %q (its own writes alone)", i+1, f, got, want)
		}
	}
	if got := agentShOK(t, src, false, "cat gen/1 "+file+"; ls gen | wc -l"); got != "hello from a package\n10000\n" {
		t.Errorf("the source after its forks wrote: %q; want its file and 10,000 files, untouched", got)
	}
}

// A fork of a booted sandbox in which nginx was started boots, and
// serves once nginx is started in it; the fork's page is its own.
func TestForkOfABootedSandboxServesNginx(t *testing.T) {
	install(t)
	if _, err := os.Stat("/usr/sbin/nginx"); err != nil {
		t.Fatalf("nginx is not installed on the host (tests/install-deps.sh installs nginx-light): %v", err)
	}
	src, _ := bootSandbox(t, "web")
	rootSh(t, src, "systemctl start nginx && echo 'the source page' > /var/www/html/index.html")
	if page := rootSh(t, src, "curl -s http://127.0.0.1/"); page != "the source page\n" {
		t.Fatalf("nginx in the source answered %q", page)
	}
	f := strings.TrimSpace(ok(t, "fork", "--quiet", src))
	t.Cleanup(func() { ctl(t, "", "destroy", f) })
	state := ""
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		out, _, _ := ctl(t, "", "exec", f, "--", "systemctl", "is-system-running")
		if state = strings.TrimSpace(out); state == "running" || state == "degraded" {
			break
		}
	}
	if state != "running" && state != "degraded" {
		t.Fatalf("the fork %s of a booted sandbox: systemctl is-system-running says %q", f, state)
	}
	rootSh(t, f, "systemctl start nginx && echo 'the fork page' > /var/www/html/index.html")
	if page := rootSh(t, f, "curl -s http://127.0.0.1/"); page != "the fork page\n" {
		t.Errorf("nginx in the fork answered %q; want the fork's page", page)
	}
	if page := rootSh(t, src, "curl -s http://127.0.0.1/"); page != "the source page\n" {
		t.Errorf("nginx in the source, after its fork's change, answered %q", page)
	}
}

// try --from runs each variant in a fork of the sandbox: what it set up
// is in each; the winner is kept, the source untouched.
func TestTryFromASandbox(t *testing.T) {
	install(t)
	tryProject(t, "tryfrom")
	src := strings.TrimSpace(ok(t, "create", "--quiet", "tryfrom"))
	t.Cleanup(func() { ctl(t, "", "destroy", src) })
	ok(t, "exec", src, "--", "sh", "-c", "echo warmed > warm.txt")
	// A fork has its source's options: a create option beside --from is
	// refused, and nothing is made.
	if out, errOut, code := ctl(t, "", "try", "--from", src, "--memory", "256M", "--check", "true", "--variant", "true"); code == 0 || !strings.Contains(errOut, "with From each sandbox is a fork") {
		t.Errorf("try --from with --memory: exit %d: %s%s; want a refusal saying each sandbox is a fork", code, out, errOut)
	}
	prefix := "tf-" + suffix()
	out, errOut, code := ctl(t, "", "try", "--from", src, "--name", prefix, "--check", "test -f warm.txt && sh check.sh",
		"--variant", tryWrong, "--variant", tryRight)
	if code != 0 {
		t.Fatalf("try --from: exit %d: %s%s", code, out, errOut)
	}
	if names := sandboxesOf(t, "tryfrom"); len(names) != 2 || !strings.HasSuffix(names[1], prefix+"-2") {
		t.Errorf("sandboxes of the project after try --from: %q; want the source and the winner %s-2", names, prefix)
	}
	if got := ok(t, "exec", prefix+"-2", "--", "sh", "-c", "cat warm.txt; sh price.sh 1000"); got != "warmed\n1200\n" {
		t.Errorf("the winner: %q; want the source's warm.txt and the right price", got)
	}
	ctl(t, "", "destroy", prefix+"-2")
	if got := ok(t, "exec", src, "--", "sh", "price.sh", "1000"); got != "1020\n" {
		t.Errorf("the source after try --from: price %q; want its own (1020)", got)
	}
}

// Bad input is refused with words that say what to do, and leaves the
// source as it was: a count of 0 or 17, a name taken, another user's
// sandbox (the same answer as one that does not exist).
func TestForkRefusesBadInput(t *testing.T) {
	rootInsideSetup(t)
	src := strings.TrimSpace(ok(t, "create", "--quiet", "web"))
	t.Cleanup(func() { ctl(t, "", "destroy", src) })
	ok(t, "exec", src, "--", "sh", "-c", "echo mine > mine.txt")
	taken := "taken-" + suffix()
	other := strings.TrimSpace(ok(t, "create", "--quiet", "--name", taken, "web"))
	t.Cleanup(func() { ctl(t, "", "destroy", other) })
	before := len(sandboxesOf(t, "web"))
	for _, c := range []struct {
		as    string
		args  []string
		words string
	}{
		{"", []string{"fork", "--count", "0", src}, "make 1 to 16 forks at once"},
		{"", []string{"fork", "--count", "17", src}, "make 1 to 16 forks at once"},
		{"", []string{"fork", "--count", "2", "--name", "x-" + suffix(), "--name", taken, src}, fmt.Sprintf("a sandbox named %q exists", taken)},
		{"", []string{"fork", "--name", "a", "--name", "b", src}, "2 names for 1 forks"},
		{rootAgent, []string{"fork", src}, "no sandbox"},
	} {
		var out, errOut string
		var code int
		if c.as == "" {
			out, errOut, code = ctl(t, "", c.args...)
		} else {
			out, errOut, code = ctlAs(t, c.as, c.args...)
		}
		if code == 0 || !strings.Contains(errOut, c.words) {
			t.Errorf("sandboxctl %s (as %q): exit %d: %s%s; want a refusal saying %q", strings.Join(c.args, " "), c.as, code, out, errOut, c.words)
		}
	}
	if n := len(sandboxesOf(t, "web")); n != before {
		t.Errorf("sandboxes of web after the refusals: %d; want %d, as before", n, before)
	}
	if got := ok(t, "exec", src, "--", "cat", "mine.txt"); got != "mine\n" {
		t.Errorf("the source after the refusals: mine.txt %q", got)
	}
	// The control: the same fork, asked right, is made (--json).
	name := "ok-" + suffix()
	var made struct {
		Sandbox    string   `json:"sandbox"`
		Forks      []string `json:"forks"`
		NotCarried []string `json:"not_carried"`
	}
	if err := json.Unmarshal([]byte(ok(t, "fork", "--json", "--name", name, src)), &made); err != nil {
		t.Fatal(err)
	}
	if len(made.Forks) != 1 || made.Sandbox != src || made.NotCarried == nil {
		t.Fatalf("fork --json: %+v; want the source and one fork, not_carried a list", made)
	}
	t.Cleanup(func() { ctl(t, "", "destroy", made.Forks[0]) })
	if got := ok(t, "exec", name, "--", "cat", "mine.txt"); got != "mine\n" {
		t.Errorf("the fork named %s: mine.txt %q", name, got)
	}
}

// Forks count against their owner's bounds: at max_sandboxes_per_user 2,
// a fork --count 2 of one sandbox is refused at its second fork, and the
// first is destroyed with it; with destroy-oldest, making room never
// destroys the sandbox forked. A member of its own, whom no earlier test
// left sandboxes, is the owner.
func TestForksCountAgainstTheOwnersBounds(t *testing.T) {
	install(t)
	const member, project = "fork-bounds", "fork-bounds"
	uid, gid := groupMember(t, member)
	memberProject(t, project, uid, gid, map[string]string{"f": "f\n"})
	for _, policy := range []string{"refuse", "destroy-oldest"} {
		t.Run(policy, func(t *testing.T) {
			reconfigure(t, fmt.Sprintf("[limits]\nmax_sandboxes_per_user = 2\non_user_limit = %q\n", policy))
			if n := len(sandboxesOf(t, project)); n != 0 {
				t.Fatalf("%s has %d sandboxes before the test; want none", member, n)
			}
			src := strings.TrimSpace(okAs(t, member, "create", "--quiet", project))
			t.Cleanup(func() { ctl(t, "", "destroy", src) })
			okAs(t, member, "exec", src, "--", "sh", "-c", "echo mine > mine.txt")
			out, errOut, code := ctlAs(t, member, "fork", "--count", "2", src)
			words := map[string]string{
				"refuse":         "the limit per user (limits.max_sandboxes_per_user)",
				"destroy-oldest": "making room would destroy the sandbox forked",
			}[policy]
			if code == 0 || !strings.Contains(errOut, words) || !strings.Contains(errOut, "the 1 fork(s) made were destroyed") {
				t.Errorf("fork --count 2 at a limit of 2 (%s): exit %d: %s%s; want a refusal saying %q and that the fork made was destroyed", policy, code, out, errOut, words)
			}
			if n := len(sandboxesOf(t, project)); n != 1 {
				t.Errorf("sandboxes of %s after the refused fork: %d; want 1, the source, as before", project, n)
			}
			if got := okAs(t, member, "exec", src, "--", "cat", "mine.txt"); got != "mine\n" {
				t.Errorf("the source after the refused fork: mine.txt %q", got)
			}
		})
	}
}
