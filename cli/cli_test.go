package cli

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/cli/verb"
)

// run runs sandboxctl in-process with args; the cases here stop before
// any call to the daemon.
func run(args ...string) (string, string, int) {
	var out, errOut bytes.Buffer
	code := Run(context.Background(), "test", append([]string{"sandboxctl"}, args...), &out, &errOut)
	return out.String(), errOut.String(), code
}

func TestUsageMistakesShowTheRightForm(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"create"}, "create takes PROJECT (usage: sandboxctl create [options] PROJECT)"},
		{[]string{"create", "a", "b"}, "create takes PROJECT"},
		{[]string{"create", "--memory", "lots", "web"}, "--memory lots:"},
		{[]string{"create", "--cpu", "50", "web"}, "--cpu 50:"},
		{[]string{"create", "--ttl", "-1h", "web"}, "--ttl -1h0m0s: want a duration above 0"},
		{[]string{"create", "--colour", "red", "web"}, "flag provided but not defined: -colour (usage: sandboxctl create [options] PROJECT)"},
		{[]string{"exec"}, "which sandbox? (usage: sandboxctl exec [options] SANDBOX -- COMMAND [ARG...])"},
		{[]string{"exec", "x"}, "what command?"},
		{[]string{"exec", "--env", "NOEQUALS", "x", "true"}, "--env NOEQUALS: want KEY=value"},
		{[]string{"status"}, "status takes SANDBOX"},
		{[]string{"project", "add", "x"}, "add takes NAME LOCATION"},
	} {
		_, errOut, code := run(c.args...)
		if code != verb.ExitUsage || !strings.Contains(errOut, c.want) {
			t.Errorf("sandboxctl %s: exit %d, %q; want exit 2 with %q", strings.Join(c.args, " "), code, errOut, c.want)
		}
	}
}

func TestTheManPageIsValidRoff(t *testing.T) {
	out, errOut, code := run("man")
	if code != 0 {
		t.Fatalf("man: %d %s", code, errOut)
	}
	for _, want := range []string{".TH SANDBOXCTL 1", ".SH EXIT STATUS", "project add", "\\-\\-read\\-only\\-project"} {
		if !strings.Contains(out, want) {
			t.Errorf("the man page lacks %q", want)
		}
	}
	f := filepath.Join(t.TempDir(), "sandboxctl.1")
	if err := os.WriteFile(f, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("man", "--warnings", "-l", f)
	cmd.Env = append(os.Environ(), "MANWIDTH=80", "MANPAGER=cat", "PAGER=cat")
	rendered, err := cmd.CombinedOutput()
	if err != nil || strings.Contains(string(rendered), "warning:") || !strings.Contains(string(rendered), "EXIT STATUS") {
		t.Errorf("man -l: %v\n%s", err, rendered)
	}
}
