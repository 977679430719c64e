package integration

import (
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/tests/testbed"
)

// Hostile members against fork, stop and start, try --from and declared
// processes (issue 31): each attack is done for real against the daemon,
// beside its control (the same call by the owner, or within bounds).

// Another member may not fork, stop, start, `try --from` or declare a
// process in root's sandbox, nor learn that it exists: each refusal is
// word for word the one for an id nobody has; the sandbox runs on with
// its file, and no sandbox was made. The owner's stop and start are the
// control.
func TestHostileMemberCannotForkStopOrStartAnothersSandbox(t *testing.T) {
	accessUsers(t)
	src := sandbox(t)
	ok(t, "exec", src, "--", "sh", "-c", "echo mine > mine.txt")
	const nobodys = "0123456789ab"
	before := len(sandboxesOf(t, "web"))
	for _, args := range [][]string{
		{"fork", "SB"},
		{"fork", "--count", "16", "SB"},
		{"stop", "SB"},
		{"start", "SB"},
		{"spawn", "--restart", "SB", "--", "sleep", "1000"},
		{"try", "--from", "SB", "--check", "true", "--variant", "true"},
	} {
		with := func(id string) []string {
			out := make([]string, len(args))
			for i, a := range args {
				out[i] = strings.ReplaceAll(a, "SB", id)
			}
			return out
		}
		out, errOut, code := accCtl(t, accBob, with(src)...)
		_, errNobody, codeNobody := accCtl(t, accBob, with(nobodys)...)
		if code == 0 || !strings.Contains(errOut, "no sandbox") {
			t.Errorf("sandboxctl %s as %s: exit %d: %s%s; want the refusal of a sandbox that does not exist", strings.Join(args, " "), accBob, code, out, errOut)
		}
		if strings.ReplaceAll(errOut, src, nobodys) != errNobody || code != codeNobody {
			t.Errorf("sandboxctl %s as %s: root's sandbox is refused as %d %q, one nobody has as %d %q: the answer tells that it exists",
				strings.Join(args, " "), accBob, code, errOut, codeNobody, errNobody)
		}
	}
	if n := len(sandboxesOf(t, "web")); n != before {
		t.Errorf("sandboxes of web after the refusals: %d; want %d, as before", n, before)
	}
	if got := ok(t, "exec", src, "--", "cat", "mine.txt"); got != "mine\n" {
		t.Errorf("the sandbox after another member's calls: mine.txt %q", got)
	}
	if out := ok(t, "--json", "ps", src); strings.Contains(out, "sleep") {
		t.Errorf("another member's spawn runs in the sandbox: %s", out)
	}
	// The control: its owner stops and starts it.
	ok(t, "stop", src)
	ok(t, "start", src)
	if got := ok(t, "exec", src, "--", "cat", "mine.txt"); got != "mine\n" {
		t.Errorf("the sandbox after its owner's stop and start: mine.txt %q", got)
	}
}

// A fork is a new sandbox: it hides what the host and its profile hide
// now, not only what they hid when its source was made. Before: a path an
// admin hid since (here a profile's hidden_paths) was readable in a fork
// of an older sandbox, while a new sandbox of the same profile hid it.
func TestHostileForkHidesWhatTheHostHidesNow(t *testing.T) {
	install(t)
	const secret = "/etc/sandboxd-fork-secret"
	if err := os.WriteFile(secret, []byte("secret\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(secret) })
	reconfigure(t, "[profile.forkhide]\nhidden_paths = []\n")
	src := sandbox(t, "--profile", "forkhide")
	if got := ok(t, "exec", src, "--", "cat", secret); got != "secret\n" {
		t.Fatalf("the file before it is hidden: %q", got)
	}
	reconfigure(t, "[profile.forkhide]\nhidden_paths = ["+`"`+secret+`"`+"]\n")
	// The control: a new sandbox of the profile does not see it.
	fresh := sandbox(t, "--profile", "forkhide")
	if out, _, code := ctl(t, "", "exec", fresh, "--", "cat", secret); code == 0 && strings.Contains(out, "secret") {
		t.Fatalf("a new sandbox of the profile reads the hidden file: %q", out)
	}
	var made struct {
		Forks []string `json:"forks"`
	}
	if err := json.Unmarshal([]byte(ok(t, "fork", "--json", src)), &made); err != nil || len(made.Forks) != 1 {
		t.Fatalf("fork --json: %v %+v", err, made)
	}
	t.Cleanup(func() { ctl(t, "", "destroy", made.Forks[0]) })
	if out, _, code := ctl(t, "", "exec", made.Forks[0], "--", "cat", secret); code == 0 && strings.Contains(out, "secret") {
		t.Errorf("the fork reads %s, which the host hides now: %q", secret, out)
	}
}

// A declared process is kept in the sandbox's record: one whose
// environment is over 16 KiB, or a 33rd, is refused with words that say
// the bound, and runs not; the same process undeclared is the control.
func TestHostileDeclaredProcessesAreBounded(t *testing.T) {
	install(t)
	sb := sandbox(t)
	big := "BIG=" + strings.Repeat("x", 20<<10)
	out, errOut, code := ctl(t, "", "spawn", "--restart", "--env", big, sb, "--", "sleep", "1000")
	if code == 0 || !strings.Contains(errOut, "more than 16384") {
		t.Errorf("spawn --restart with a 20 KiB environment: exit %d: %s%s; want a refusal naming the bound", code, out, errOut)
	}
	if ps := ok(t, "--json", "ps", sb); strings.Contains(ps, "sleep") {
		t.Errorf("the refused declaration runs: %s", ps)
	}
	ok(t, "spawn", "--env", big, sb, "--", "true") // the control
	for i := range 32 {
		ok(t, "spawn", "--restart", sb, "--", "sleep", "100"+string(rune('0'+i%10)))
	}
	out, errOut, code = ctl(t, "", "spawn", "--restart", sb, "--", "sleep", "1000")
	if code == 0 || !strings.Contains(errOut, "it declares 32, the most one may") {
		t.Errorf("a 33rd spawn --restart: exit %d: %s%s; want a refusal naming the bound", code, out, errOut)
	}
}

// A fork's disk quota counts what it holds of its source's writes once
// the source is gone: a sandbox under --disk 32M writes 24 MiB, is forked
// and destroyed, and its fork may write only what is left of the 32 MiB.
// Before: the fork's group counted only what the fork wrote (a snapshot
// owns nothing under simple quotas, and the source's group went with it),
// so a chain of fork and destroy held N × 32 MiB under one 32 MiB bound.
func TestHostileForkAndDestroyDoNotEscapeTheDiskQuota(t *testing.T) {
	install(t)
	src := strings.TrimSpace(ok(t, "create", "--quiet", "--disk", "32M", "web"))
	destroyed := false
	t.Cleanup(func() {
		if !destroyed {
			ctl(t, "", "destroy", src)
		}
	})
	forkOf := func(id string) string {
		var made struct {
			Forks []string `json:"forks"`
		}
		if err := json.Unmarshal([]byte(ok(t, "fork", "--json", id)), &made); err != nil || len(made.Forks) != 1 {
			t.Fatalf("fork --json: %v %+v", err, made)
		}
		return made.Forks[0]
	}
	// A fork destroyed takes its group, never its source's bound with it
	// (the source's volumes were members of the fork's group too).
	ok(t, "destroy", forkOf(src))
	// The control: the source takes 24 MiB, and no more than its 32 MiB.
	if n := bytesOut(t, "24 MiB into the source", ok(t, "exec", src, "--", "sh", "-c", writeMiB("a.bin", 24))); n != 24*mib {
		t.Fatalf("the control: 24 MiB into the source under --disk 32M wrote %d bytes; want all of it", n)
	}
	if n := bytesOut(t, "24 MiB more into the source", ok(t, "exec", src, "--", "sh", "-c", writeMiB("c.bin", 24)+"; rm -f c.bin; sync")); n > 10*mib {
		t.Fatalf("24 MiB more into the source that holds 24 MiB under --disk 32M wrote %d bytes; want about 8 MiB", n)
	}
	fork := forkOf(src)
	t.Cleanup(func() { ctl(t, "", "destroy", fork) })
	ok(t, "destroy", src)
	destroyed = true
	more := bytesOut(t, "24 MiB more into the fork", ok(t, "exec", fork, "--", "sh", "-c", writeMiB("b.bin", 24)))
	held := bytesOut(t, "a.bin in the fork", ok(t, "exec", fork, "--", "stat", "-c", "%s", "a.bin"))
	t.Logf("--disk 32M: the fork holds its source's %.1f MiB and wrote %.1f MiB more", float64(held)/mib, float64(more)/mib)
	if held+more > 34*mib {
		t.Errorf("--disk 32M: the fork holds %d bytes of its destroyed source's and wrote %d more, %d in all; want 32 MiB in all", held, more, held+more)
	}
}

// An idle-stopped sandbox is started by the next connection to its port,
// but only by one its owner may make: another member's connection to
// its TCP port is refused before it wakes anything, and one its caller
// stopped stays stopped whoever connects. The owner's connection, which
// starts it, is the control. (A sandbox with a background process is
// never idle: this one has none.)
func TestHostileOthersConnectionsDoNotStartAStoppedSandbox(t *testing.T) {
	accessUsers(t)
	reconfigure(t, "[limits]\nidle_stop = \"2s\"\n")
	sb := sandbox(t)
	addr := strings.TrimSpace(ok(t, "port", "--tcp", sb, "8000"))
	status := func() string { return strings.TrimSpace(ok(t, "--quiet", "status", sb)) }
	waitFor(t, "the idle sandbox to be stopped", func() bool { return status() == "stopped" })

	curl(t, accBob, "", addr)
	if st := status(); st != "stopped" {
		t.Errorf("after another member's connection to its port, the idle-stopped sandbox is %q; want stopped", st)
	}
	curl(t, "", "", addr) // the control: the owner's starts it
	waitFor(t, "the owner's connection to start it", func() bool { return status() != "stopped" })

	ok(t, "stop", sb)
	for _, who := range []string{"", accBob} {
		curl(t, who, "", addr)
		if st := status(); st != "stopped" {
			t.Errorf("after a connection (as %q) to its port, the sandbox its caller stopped is %q; want stopped", who, st)
		}
	}
}

// A declared process that ends at once is spawned again once a start,
// never in a loop: after a stop and a start it ran once more (one journal
// line), and the sandbox serves commands.
func TestHostileDeclaredProcessThatEndsAtOnceDoesNotSpin(t *testing.T) {
	install(t)
	sb := sandbox(t)
	ok(t, "spawn", "--restart", sb, "--", "sh", "-c", "echo ran >> ran.txt")
	ok(t, "stop", sb)
	ok(t, "start", sb)
	waitFor(t, "the declared process to run again", func() bool {
		out, _, _ := ctl(t, "", "exec", sb, "--", "cat", "ran.txt")
		return out == "ran\nran\n"
	})
	ok(t, "exec", sb, "--", "true")
	journal := testbed.MustRun(t, "journalctl", "--no-pager", "-o", "cat", "-u", "sandboxd.service", "SANDBOX_ID="+sb)
	if n := strings.Count(journal, "declared process spawned again"); n != 1 {
		t.Errorf("the declared process was spawned again %d times after one start; want once:\n%s", n, journal)
	}
	if got := ok(t, "exec", sb, "--", "cat", "ran.txt"); got != "ran\nran\n" {
		t.Errorf("ran.txt after a stop and a start: %q; want two runs", got)
	}
}

// A stopped sandbox whose project an admin removed since: its start is
// refused with words that name the project, and it stays stopped with
// its files; destroying it leaves no scope.
func TestStartOfAStoppedSandboxWhoseProjectIsGone(t *testing.T) {
	accessUsers(t)
	dir := accessProject(t, "acc-goneproj", "root:root", 0o755, map[string]os.FileMode{"readme": 0o644})
	reconfigure(t, "[[project]]\nname = \"goneproj\"\npath = \""+dir+"\"\n")
	sb := strings.TrimSpace(ok(t, "create", "--quiet", "goneproj"))
	t.Cleanup(func() { ctl(t, "", "destroy", sb) })
	ok(t, "exec", sb, "--", "sh", "-c", "echo kept > kept.txt")
	path := property(t, "/org/sandboxd1/sandbox/"+sb, "Path")
	ok(t, "stop", sb)
	reconfigure(t, "")
	out, errOut, code := ctl(t, "", "start", sb)
	if code == 0 || !strings.Contains(errOut, "goneproj") {
		t.Errorf("start of a sandbox whose project is gone: exit %d: %s%s; want a refusal naming the project", code, out, errOut)
	}
	if st := strings.TrimSpace(ok(t, "--quiet", "status", sb)); st != "stopped" {
		t.Errorf("after the refused start the sandbox is %q; want stopped", st)
	}
	if got := fileOf(path, "kept.txt"); got != "kept\n" {
		t.Errorf("after the refused start kept.txt on the pool holds %q", got)
	}
	ok(t, "destroy", sb)
	if out, _ := exec.Command("systemctl", "is-active", "sandbox-"+sb+".scope").Output(); strings.TrimSpace(string(out)) == "active" {
		t.Errorf("after its destroy, the scope of the sandbox is active")
	}
}
