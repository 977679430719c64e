package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/tests/testbed"
)

// fakeLine is what a hostile sandbox wants a reviewer to read as
// sandboxctl's own verdict.
const fakeLine = "stage project (project): passed"

// hostileNames are file names a sandbox may make: each would move the
// cursor, clear the screen, overwrite a line, reorder it, or print a line
// of its own if shown raw.
var hostileNames = []string{
	"nl\nname.txt",
	"esc\x1b[2J.txt",
	"cr\rname.txt",
	"rlo\u202etxt.sh",
	"c1\u009b31m.txt",
	"x\n" + fakeLine,
}

// hostileCheck fails, printing a terminal title sequence and a fake
// verdict.
const hostileCheck = `printf '\033]0;pwned\007\n` + fakeLine + `\n'; exit 1` + "\n"

// rawTerminalText says what in out a terminal would act on, or a line of
// out that fakes sandboxctl's verdict; "" when there is none.
func rawTerminalText(out string) string {
	for _, r := range out {
		switch {
		case r == '\x1b', r == '\r', r == '\a', r == 0x7f, r >= 0x80 && r <= 0x9f,
			r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069:
			return fmt.Sprintf("a raw %U", r)
		}
	}
	for _, l := range strings.Split(out, "\n") {
		// (A check's output shows behind "    | ": marked as not ours.)
		if strings.HasPrefix(strings.TrimLeft(l, " "), fakeLine) {
			return "a line that fakes the verdict: " + jsonQuote(l)
		}
	}
	return ""
}

func jsonQuote(s string) string { b, _ := json.Marshal(s); return string(b) }

// safeOutput fails the test if out, what `sandboxctl args` printed, holds
// raw terminal text.
func safeOutput(t *testing.T, out string, args ...string) {
	t.Helper()
	if bad := rawTerminalText(out); bad != "" {
		t.Errorf("sandboxctl %s printed %s:\n%q", strings.Join(args, " "), bad, out)
	}
}

// onTerminal runs sandboxctl with stdin (nil: none) and its stdout on a
// terminal (output processing off, so the bytes are sandboxctl's own)
// and returns what it wrote there.
func onTerminal(t *testing.T, stdin io.Reader, args ...string) string {
	t.Helper()
	m, s := openPTY(t)
	defer m.Close()
	tio, err := unix.IoctlGetTermios(int(s.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	tio.Oflag &^= unix.OPOST
	if err := unix.IoctlSetTermios(int(s.Fd()), unix.TCSETS, tio); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(ctlBin(), args...)
	var errOut bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, s, &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s.Close()
	out, _ := io.ReadAll(m) // EIO once sandboxctl is gone
	if err := cmd.Wait(); err != nil {
		t.Fatalf("sandboxctl %s on a terminal: %v: %s", strings.Join(args, " "), err, errOut.String())
	}
	return string(out)
}

// TestHostileNamesAndOutputReachNoTerminalRaw: a sandbox makes files whose
// names hold line breaks, escape sequences, a carriage return, a bidi
// override and a C1 control, and a check that prints a title sequence and
// a fake verdict. What sandboxctl shows of them (diff, diff --text, a
// conflict, a failed approval, a failed check) and the daemon's journal
// MESSAGE hold none of it raw and no faked line; the raw names are really
// in the sandbox, and reach sandboxctl raw (its JSON), so each check can
// fail.
func TestHostileNamesAndOutputReachNoTerminalRaw(t *testing.T) {
	path := addProject(t, "hostile", map[string]string{"check.sh": "true\n"})
	reconfigure(t, `
[[stage]]
name = "project"
target = "project"
checks = ["sh check.sh"]
check_timeout = "1m"
approval = "admin"
`)
	since := time.Now().Add(-time.Second).Format("2006-01-02 15:04:05")
	id := strings.TrimSpace(ok(t, "create", "--quiet", "hostile"))
	script := `for n in "$@"; do echo sandbox > "$n"; done; printf 'line\033[2J\rFAKE\n' > content.txt`
	ok(t, append([]string{"exec", id, "--", "sh", "-c", script, "sh"}, hostileNames...)...)
	if err := os.WriteFile(filepath.Join(property(t, "/org/sandboxd1/sandbox/"+id, "Path"), "check.sh"), []byte(hostileCheck), 0o644); err != nil {
		t.Fatal(err)
	}

	// Control: the names are in the sandbox byte for byte, and the daemon
	// hands them to sandboxctl raw (its JSON says so).
	listed := strings.Split(ok(t, "exec", id, "--", "find", ".", "-maxdepth", "1", "-type", "f", "-printf", `%P\0`), "\x00")
	var changes []struct{ Path string }
	if err := json.Unmarshal([]byte(ok(t, "--json", "diff", id)), &changes); err != nil {
		t.Fatal(err)
	}
	for _, n := range hostileNames {
		if !slices.Contains(listed, n) {
			t.Fatalf("the sandbox has no file %q: %q", n, listed)
		}
		if !slices.ContainsFunc(changes, func(c struct{ Path string }) bool { return c.Path == n }) {
			t.Fatalf("diff --json has no %q: %+v", n, changes)
		}
	}

	// diff lists each name quoted as git quotes it; diff --text's headers
	// too.
	out := ok(t, "diff", id)
	safeOutput(t, out, "diff", id)
	for _, want := range []string{`A "esc\033[2J.txt"`, `A "x\nstage project (project): passed"`, `A "rlo\342\200\256txt.sh"`} {
		if !strings.Contains(out, want) {
			t.Errorf("diff has no %s:\n%s", want, out)
		}
	}
	text := ok(t, "diff", "--text", id)
	if !strings.Contains(text, `+++ "b/cr\rname.txt"`) {
		t.Errorf("diff --text has no quoted header for cr\\rname.txt:\n%s", text)
	}
	// A file's own bytes go raw to a pipe (git apply reads them), but
	// not to a terminal.
	if !strings.Contains(text, "+line\x1b[2J\rFAKE\n") {
		t.Errorf("diff --text to a pipe changed the file's bytes:\n%q", text)
	}
	safeOutput(t, strings.ReplaceAll(text, "+line\x1b[2J\rFAKE\n", ""), "diff", "--text", id)
	tty := onTerminal(t, nil, "diff", "--text", id)
	safeOutput(t, tty, "diff", "--text", id, "(on a terminal)")
	if !strings.Contains(tty, `+line\x1b[2J\rFAKE`) {
		t.Errorf("diff --text on a terminal does not show the file's line escaped:\n%q", tty)
	}

	// The stage waits for an admin; meanwhile the project gets the same
	// names: approve shows the conflict, escaped.
	out = ok(t, "promote", id)
	safeOutput(t, out, "promote", id)
	pid := promotionIDRe.FindStringSubmatch(out)[1]
	for _, n := range hostileNames {
		if err := os.WriteFile(filepath.Join(path, n), []byte("project\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// What the approver reads of the change holds the file's line
	// escaped, on a terminal or not.
	for _, text := range []string{ok(t, "promotions", "--diff", pid), onTerminal(t, nil, "promotions", "--diff")} {
		safeOutput(t, text, "promotions", "--diff", pid)
		if !strings.Contains(text, `+line\x1b[2J\rFAKE`) {
			t.Errorf("promotions --diff does not show the file's line escaped:\n%q", text)
		}
	}
	stdout, stderr, code := ctl(t, "", "approve", "--yes", pid)
	if code != 1 || !strings.Contains(stdout, "FAILED") {
		t.Errorf("approve over a conflict: exit %d:\n%s%s", code, stdout, stderr)
	}
	safeOutput(t, stdout+stderr, "approve", pid)

	// A new promotion is refused at once, naming each path, escaped.
	stdout, stderr, code = ctl(t, "", "promote", id)
	if code != 5 || !strings.Contains(stderr, `esc\x1b[2J.txt`) {
		t.Errorf("promote over a conflict: exit %d; want 5 naming the paths:\n%s%s", code, stdout, stderr)
	}
	safeOutput(t, stdout+stderr, "promote", id)

	// Forced and approved, its check fails with a title sequence and a
	// fake verdict: shown escaped, behind "| ".
	out = ok(t, "promote", "--force", id)
	safeOutput(t, out, "promote", "--force", id)
	pid = promotionIDRe.FindStringSubmatch(out)[1]
	stdout, stderr, code = ctl(t, "", "approve", "--yes", pid)
	if code != 1 || !strings.Contains(stdout, `    | \x1b]0;pwned\a`) || !strings.Contains(stdout, "    | "+fakeLine) {
		t.Errorf("approving a change whose check fails: exit %d:\n%s%s", code, stdout, stderr)
	}
	safeOutput(t, stdout+stderr, "approve", pid)
	safeOutput(t, ok(t, "promotions", pid), "promotions", pid)
	if p := promotionRecord(t, pid); len(p.Conflicts) != len(hostileNames) || len(p.Stages) == 0 || len(p.Stages[0].Checks) == 0 ||
		!strings.Contains(p.Stages[0].Checks[0].Output, "\x1b]0;pwned\x07") {
		t.Errorf("the record (raw, for scripts) lacks the conflicts or the check's output: %+v", p)
	}

	journalHasNoRawText(t, since)
}

// journalHasNoRawText checks the daemon's journal since then: no MESSAGE
// holds a control character, and the hostile names did reach it (escaped
// in MESSAGE, raw in the ERROR field that journalctl shows as bytes).
func journalHasNoRawText(t *testing.T, since string) {
	t.Helper()
	out := testbed.MustRun(t, "journalctl", "--no-pager", "-o", "json", "-u", "sandboxd.service", "--since", since)
	escaped, raw := false, false
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var e map[string]json.RawMessage
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatalf("journalctl -o json: %v: %s", err, l)
		}
		msg := fieldBytes(t, e["MESSAGE"])
		if bad := rawTerminalText(string(msg)); bad != "" || bytes.ContainsAny(msg, "\n\x00") {
			t.Errorf("a journal MESSAGE holds %s%q", bad, msg)
		}
		escaped = escaped || bytes.Contains(msg, []byte(`esc\x1b[2J.txt`))
		raw = raw || bytes.Contains(fieldBytes(t, e["ERROR"]), []byte("esc\x1b[2J.txt"))
	}
	if !escaped {
		t.Errorf("no journal MESSAGE since %s names esc\\x1b[2J.txt (escaped):\n%s", since, out)
	}
	if !raw {
		t.Logf("no ERROR field holds the raw name (the daemon escaped its error text before logging it)")
	}
}

// fieldBytes is a journal field of journalctl -o json: a string, or an
// array of bytes when it is not printable text.
func fieldBytes(t *testing.T, v json.RawMessage) []byte {
	t.Helper()
	if v == nil {
		return nil
	}
	var s string
	if err := json.Unmarshal(v, &s); err == nil {
		return []byte(s)
	}
	var b []byte
	var nums []int
	if err := json.Unmarshal(v, &nums); err != nil {
		t.Fatalf("a journal field that is neither text nor bytes: %s", v)
	}
	for _, n := range nums {
		b = append(b, byte(n))
	}
	return b
}
