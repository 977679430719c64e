package promote

import (
	"context"
	"errors"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/cowfs"
)

func TestReplicaParseTargetAccepts(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Target
		str  string // String(), when not in
	}{
		{"project", Target{Kind: TargetProject}, ""},
		{"/srv/staging/app", Target{Kind: TargetPath, Path: "/srv/staging/app"}, ""},
		{"/srv//staging/./app/", Target{Kind: TargetPath, Path: "/srv/staging/app"}, "/srv/staging/app"},
		{"/srv/it's here", Target{Kind: TargetPath, Path: "/srv/it's here"}, ""},
		{"ssh://host/srv/app", Target{Kind: TargetSSH, Host: "host", Path: "/srv/app"}, ""},
		{"ssh://deploy@stage.example.com:2222/srv/app", Target{Kind: TargetSSH, User: "deploy", Host: "stage.example.com", Port: "2222", Path: "/srv/app"}, ""},
		{"ssh://root@127.0.0.1:22/mnt/x/app", Target{Kind: TargetSSH, User: "root", Host: "127.0.0.1", Port: "22", Path: "/mnt/x/app"}, ""},
		{"ssh://[::1]:2200/srv/app", Target{Kind: TargetSSH, Host: "::1", Port: "2200", Path: "/srv/app"}, ""},
		{"SSH://host/srv/app", Target{Kind: TargetSSH, Host: "host", Path: "/srv/app"}, "ssh://host/srv/app"},
		{"ssh://host/srv/my%20app", Target{Kind: TargetSSH, Host: "host", Path: "/srv/my app"}, ""},
		{"ssh://host/srv/app/", Target{Kind: TargetSSH, Host: "host", Path: "/srv/app"}, "ssh://host/srv/app"},
	} {
		got, err := ParseTarget(tc.in)
		if err != nil {
			t.Errorf("ParseTarget(%q): %v", tc.in, err)
			continue
		}
		if got != tc.want {
			t.Errorf("ParseTarget(%q) = %#v, want %#v", tc.in, got, tc.want)
		}
		str := tc.str
		if str == "" {
			str = tc.in
		}
		if got.String() != str {
			t.Errorf("ParseTarget(%q).String() = %q, want %q", tc.in, got.String(), str)
		}
		again, err := ParseTarget(got.String())
		if err != nil || again != got {
			t.Errorf("ParseTarget(%q) does not read back what String wrote (%q): %#v, %v", tc.in, got.String(), again, err)
		}
	}
}

func TestReplicaParseTargetRejects(t *testing.T) {
	for _, tc := range []struct{ in, why string }{
		{"", "empty"},
		{"srv/app", "relative path"},
		{"./app", "relative path"},
		{"app", "relative path"},
		{"/srv/../etc", `".." component`},
		{"/srv/app/..", `".." component`},
		{"/", "root directory"},
		{"//", "root directory"},
		{"/srv/a\nb", "control character"},
		{"ssh://", "empty host"},
		{"ssh:///srv/app", "empty host"},
		{"ssh://root@/srv/app", "empty host"},
		{"ssh://@host/srv/app", "empty user"},
		{"ssh://host:0/srv/app", "bad port"},
		{"ssh://host:70000/srv/app", "bad port"},
		{"ssh://host:22x/srv/app", "invalid port"},
		{"ssh://host:/srv/app", "empty port"},
		{"ssh://host", "no path"},
		{"ssh://host/", "root directory"},
		{"ssh://host/srv/../etc", `".." component`},
		{"ssh://host/srv/a%0Ab", "control character"},
		{"ssh://host/srv/app?x=1", "query or fragment"},
		{"ssh://host/srv/app#x", "query or fragment"},
		{"ssh://user:secret@host/srv/app", "password"},
		{"ssh://-oProxyCommand=evil/srv/app", "starts with '-'"},
		{"ssh://-l@host/srv/app", "starts with '-'"},
		{"ssh://us$er@host/srv/app", "holds '$'"},
		{"ssh://ho_st!/srv/app", "holds '!'"},
		{"rsync://host/srv/app", `unknown scheme "rsync"`},
		{"file:///srv/app", `unknown scheme "file"`},
		{"host:/srv/app", "relative path"},
	} {
		got, err := ParseTarget(tc.in)
		if err == nil {
			t.Errorf("ParseTarget(%q) = %#v; want an error (%s)", tc.in, got, tc.why)
			continue
		}
		if !errors.Is(err, ErrInvalidTarget) || !strings.Contains(err.Error(), tc.why) {
			t.Errorf("ParseTarget(%q): %v; want ErrInvalidTarget saying %q", tc.in, err, tc.why)
		}
		if tc.in != "" && !strings.Contains(err.Error(), strings.ReplaceAll(tc.in, "\n", `\n`)) {
			t.Errorf("ParseTarget(%q): %v; want the error to quote the target", tc.in, err)
		}
	}
}

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
