package cli

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	ucli "github.com/urfave/cli/v3"

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

func TestHelpOfASubcommandIsItsOwn(t *testing.T) {
	for _, args := range [][]string{{"help", "project", "add"}, {"project", "add", "--help"}, {"project", "help", "add"}} {
		out, errOut, code := run(args...)
		if code != 0 || !strings.Contains(out, "sandboxctl project add - register") ||
			!strings.Contains(out, "sandboxctl project add [options] NAME LOCATION") || strings.Contains(out, "COMMANDS:") {
			t.Errorf("sandboxctl %s: exit %d, %q%q; want project add's help", strings.Join(args, " "), code, out, errOut)
		}
	}
	if out, _, code := run("help", "project"); code != 0 || !strings.Contains(out, "COMMANDS:") || !strings.Contains(out, "adopt") {
		t.Errorf("help project: exit %d, %q; want the group's help with its commands", code, out)
	}
	if out, _, code := run("help"); code != 0 || !strings.Contains(out, "EXIT STATUS") {
		t.Errorf("help: exit %d, %q; want sandboxctl's help", code, out)
	}
	if _, errOut, code := run("help", "project", "nosuch"); code != verb.ExitUsage || !strings.Contains(errOut, `"nosuch" is not a command of sandboxctl project`) {
		t.Errorf("help project nosuch: exit %d, %q; want exit 2 naming it", code, errOut)
	}
}

// TestFlagsShowWhatTheyTakeAndTheirRealDefaults reads every command's
// help: a switch shows no value to give it, and no default shown is a
// zero the flag's type starts at rather than what happens.
func TestFlagsShowWhatTheyTakeAndTheirRealDefaults(t *testing.T) {
	falseZero := regexp.MustCompile(`\(default: (0|0s|false|"")\)`)
	var walk func(path []string, c *ucli.Command)
	walk = func(path []string, c *ucli.Command) {
		out, errOut, code := run(append(path, "--help")...)
		if code != 0 {
			t.Fatalf("sandboxctl %s --help: exit %d %s", strings.Join(path, " "), code, errOut)
		}
		for _, f := range c.VisibleFlags() {
			d, ok := f.(ucli.DocGenerationFlag)
			if !ok || f.Names()[0] == "help" {
				continue
			}
			line := ""
			// Only the flags' part: a description may begin a line with a flag's name.
			_, opts, _ := strings.Cut(out, "OPTIONS:")
			for l := range strings.SplitSeq(opts, "\n") {
				l = strings.TrimSpace(l)
				if rest, ok := strings.CutPrefix(l, "--"+f.Names()[0]); ok && (strings.HasPrefix(rest, " ") || strings.HasPrefix(rest, ",")) {
					line = l
					break
				}
			}
			if line == "" {
				t.Errorf("sandboxctl %s --help does not show --%s:\n%s", strings.Join(path, " "), f.Names()[0], out)
				continue
			}
			if falseZero.MatchString(line) {
				t.Errorf("sandboxctl %s --help: %q shows its type's zero as the default; give it DefaultText saying what happens", strings.Join(path, " "), line)
			}
			if !d.TakesValue() {
				names := ucli.FlagNamePrefixer(f.Names(), "")
				if rest := strings.TrimPrefix(line, names); rest == line || !strings.HasPrefix(rest, "  ") {
					t.Errorf("sandboxctl %s --help: switch --%s shows as taking a value: %q", strings.Join(path, " "), f.Names()[0], line)
				}
			}
		}
		for _, sub := range c.VisibleCommands() {
			if sub.Name != "help" {
				walk(append(slices.Clone(path), sub.Name), sub)
			}
		}
	}
	walk(nil, New("test", io.Discard, io.Discard))
	out, _, _ := run("create", "--help")
	for _, want := range []string{"--tasks uint", "4096 unless configured", "--ttl duration", "24h unless configured", "--boot  "} {
		if !strings.Contains(out, want) {
			t.Errorf("create --help lacks %q:\n%s", want, out)
		}
	}
}
