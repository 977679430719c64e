package replica

import (
	"context"
	"errors"
	"io"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/cowfs"
)

// TestReplicaShellQuote runs quoted strings through sh and gets them back
// unchanged, as the scripts' variables and as a whole script passed to ssh.
func TestReplicaShellQuote(t *testing.T) {
	for _, s := range []string{
		"", "plain", "two words", "it's", "''", `"double"`, "$HOME `id` $(id) \\ \\'",
		"new\nline", "tab\tand *?[glob]", "; rm -rf /", "-n", "'\\''", "ünïcödé",
	} {
		out, err := exec.Command("sh", "-c", "printf %s "+shellQuote(s)).Output()
		if err != nil || string(out) != s {
			t.Errorf("sh printed %q (err %v) for shellQuote(%q) = %s", out, err, s, shellQuote(s))
		}
		// Twice: a script quoted as a whole for the remote shell.
		inner := "x=" + shellQuote(s) + "\nprintf %s \"$x\""
		out, err = exec.Command("sh", "-c", "sh -c "+shellQuote(inner)).Output()
		if err != nil || string(out) != s {
			t.Errorf("sh -c of the quoted script printed %q (err %v) for %q", out, err, s)
		}
	}
}

func TestReplicaScriptVariables(t *testing.T) {
	r := &Replica{Target: Target{Kind: TargetPath, Path: "/srv/it's a $dir/app `x`"}}
	target, dir, store := r.paths()
	if target != "/srv/it's a $dir/app `x`" || dir != "/srv/it's a $dir" || store != "/srv/it's a $dir/.app `x`.sandboxd" {
		t.Fatalf("paths() = %q, %q, %q", target, dir, store)
	}
	script := r.script(`printf '%s|%s|%s|%s' "$P" "$D" "$S" "$N"`, "N", "s1")
	out, err := exec.Command("sh", "-c", script).Output()
	if err != nil {
		t.Fatal(err)
	}
	if want := target + "|" + dir + "|" + store + "|s1"; string(out) != want {
		t.Fatalf("the script saw %q, want %q", out, want)
	}
}

func TestReplicaSSHArgs(t *testing.T) {
	target, err := ParseTarget("ssh://deploy@stage:2222/srv/app")
	if err != nil {
		t.Fatal(err)
	}
	r := &Replica{Target: target, SSHOptions: []string{"-i", "/k", "-o", "UserKnownHostsFile=/kh"}}
	args := r.sshArgs("echo hi")
	want := []string{"-o", "BatchMode=yes", "-p", "2222", "-i", "/k", "-o", "UserKnownHostsFile=/kh"}
	if !slices.Equal(args[:len(want)], want) {
		t.Errorf("ssh args start %q, want %q", args, want)
	}
	if n := len(args); n < 3 || args[n-3] != "--" || args[n-2] != "deploy@stage" || args[n-1] != "sh -c 'echo hi'" {
		t.Errorf("ssh args end %q, want -- deploy@stage \"sh -c 'echo hi'\"", args)
	}
	noPort := &Replica{Target: Target{Kind: TargetSSH, Host: "stage", Path: "/srv/app"}}
	if args := noPort.sshArgs("true"); slices.Contains(args, "-p") || args[len(args)-2] != "stage" {
		t.Errorf("ssh args without port or user: %q", args)
	}
}

// TestReplicaRefusesBeforeRunning: bad names, a project target, a ZFS
// replica: refused with the right error before any command runs (the
// target's directory does not exist, so any command would fail otherwise).
func TestReplicaRefusesBeforeRunning(t *testing.T) {
	ctx := context.Background()
	path := &Replica{Target: Target{Kind: TargetPath, Path: "/nonexistent/sandboxd/app"}}
	send := func(w io.Writer) error { return nil }
	for _, name := range []string{"", "../x", "a/b", ".hidden", "-rf", "a b", "a~b", "prev:x"} {
		if _, err := path.Has(ctx, name); !errors.Is(err, cowfs.ErrInvalidName) {
			t.Errorf("Has(%q): %v; want ErrInvalidName", name, err)
		}
		if err := path.Receive(ctx, name, send); !errors.Is(err, cowfs.ErrInvalidName) {
			t.Errorf("Receive(%q): %v; want ErrInvalidName", name, err)
		}
		if _, err := path.Switch(ctx, name); !errors.Is(err, cowfs.ErrInvalidName) {
			t.Errorf("Switch(%q): %v; want ErrInvalidName", name, err)
		}
		if err := path.Revert(ctx, "prev:"+name); !errors.Is(err, cowfs.ErrInvalidName) {
			t.Errorf("Revert(prev:%q): %v; want ErrInvalidName", name, err)
		}
		if err := path.Forget(ctx, "ok", name); name != "prev:x" && !errors.Is(err, cowfs.ErrInvalidName) {
			t.Errorf("Forget(ok, %q): %v; want ErrInvalidName", name, err)
		}
	}
	if err := path.Revert(ctx, "s1"); !errors.Is(err, cowfs.ErrInvalidName) || !strings.Contains(err.Error(), "prev:NAME") {
		t.Errorf("Revert(s1): %v; want ErrInvalidName asking for prev:NAME", err)
	}

	zfs := &Replica{Target: path.Target, Backend: "zfs"}
	if _, err := zfs.Switch(ctx, "s1"); !errors.Is(err, cowfs.ErrUnsupported) || !strings.Contains(err.Error(), "ZFS") || !strings.Contains(err.Error(), path.Target.Path) {
		t.Errorf("Switch on a ZFS replica: %v; want ErrUnsupported saying ZFS and naming the target", err)
	}
	if _, err := zfs.Check(ctx, "true", nil); !errors.Is(err, cowfs.ErrUnsupported) {
		t.Errorf("Check on a ZFS replica: %v; want ErrUnsupported", err)
	}
	project := &Replica{Target: Target{Kind: TargetProject}}
	if _, err := project.Has(ctx, "s1"); !errors.Is(err, ErrInvalidTarget) {
		t.Errorf("Has on the project: %v; want ErrInvalidTarget", err)
	}
	relative := &Replica{Target: Target{Kind: TargetPath, Path: "srv/app"}}
	if _, err := relative.Has(ctx, "s1"); !errors.Is(err, ErrInvalidTarget) {
		t.Errorf("Has on a relative path: %v; want ErrInvalidTarget", err)
	}
}

func TestReplicaLastLines(t *testing.T) {
	if got := lastLines("a\n\nb\nc\n  d  \n\n", 3); got != "b; c; d" {
		t.Errorf("lastLines = %q", got)
	}
	tb := &tailBuffer{max: 4}
	for _, s := range []string{"0123", "4567", "89"} {
		_, _ = tb.Write([]byte(s))
	}
	if got := tb.String(); !strings.HasSuffix(got, "6789") || len(got) > 8 {
		t.Errorf("tailBuffer kept %q", got)
	}
}

// TestScriptExitStatuses: the scripts fail only with the statuses of the
// one table (exitStatuses), by the names the prelude defines, each used;
// and each status, failed with through the transport, comes back as the
// table's error.
func TestScriptExitStatuses(t *testing.T) {
	scripts := map[string]string{"functions.sh": scriptFunctions, "has.sh": hasScript, "receive.sh": receiveScript,
		"switch.sh": switchScript, "revert.sh": revertScript, "check.sh": checkScript, "forget.sh": forgetScript}
	defined := map[string]bool{}
	codes := map[int]string{}
	for _, e := range exitStatuses {
		if other, dup := codes[e.code]; dup || defined[e.name] || !strings.HasPrefix(e.name, "E_") {
			t.Errorf("exit status %s=%d: a name or a code twice (%s), or not E_*", e.name, e.code, other)
		}
		defined[e.name], codes[e.code] = true, e.name
	}
	failWith := regexp.MustCompile(`\bfail\s+(\S+)`)
	exitWith := regexp.MustCompile(`\bexit\s+([0-9]+)`)
	used := map[string]bool{}
	for file, script := range scripts {
		for n, line := range strings.Split(script, "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "#") {
				continue
			}
			for _, m := range failWith.FindAllStringSubmatch(line, -1) {
				name, ok := strings.CutPrefix(m[1], "$")
				if !ok || !defined[name] {
					t.Errorf("scripts/%s:%d: fail %s: want fail $E_NAME, a name of exitStatuses", file, n+1, m[1])
				}
				used[name] = true
			}
			for _, m := range exitWith.FindAllStringSubmatch(line, -1) {
				// 0: done; 143: ended by SIGTERM (128+15), as sh reports it.
				if m[1] != "0" && m[1] != "143" {
					t.Errorf("scripts/%s:%d: exit %s: a status outside exitStatuses; use fail $E_NAME", file, n+1, m[1])
				}
			}
		}
	}
	for name := range defined {
		if !used[name] {
			t.Errorf("exit status %s is in the table but no script fails with it", name)
		}
	}
	if !strings.Contains(checkScript, `"`+checkStatusPrefix+`$status"`) {
		t.Errorf("scripts/check.sh does not report the check's status as %q", checkStatusPrefix)
	}

	ctx := context.Background()
	r := &Replica{Target: Target{Kind: TargetPath, Path: "/nonexistent/sandboxd/app"}}
	for _, e := range exitStatuses {
		res := r.run(ctx, r.script(`fail $`+e.name+` "it went wrong"`), nil, nil)
		if res.code != e.code {
			t.Errorf("fail $%s exited %d, want %d", e.name, res.code, e.code)
		}
		err := r.failure(ctx, "testing", res)
		if err == nil || !strings.Contains(err.Error(), "it went wrong") || e.err != nil && !errors.Is(err, e.err) {
			t.Errorf("fail $%s: %v; want an error saying it went wrong, wrapping %v", e.name, err, e.err)
		}
	}
}
