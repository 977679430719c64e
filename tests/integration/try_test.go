package integration

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/tests/testbed"
)

// The project sandboxctl try is tried on: a price with VAT that has a
// bug (2% instead of 20%), and the check that finds it.
const (
	tryPrice = "echo $(( $1 * 102 / 100 ))\n"
	tryCheck = "got=$(sh price.sh 1000); echo \"1000 cents with VAT: $got\"; test \"$got\" = 1200\n"
	// Three fixes: a wrong one, the right one (with a note, two files
	// changed; a comma, which must not split it), one that gives up.
	tryWrong = `echo 'echo $(( $1 * 112 / 100 ))' > price.sh`
	tryRight = `echo 'echo $(( $1 * 120 / 100 ))' > price.sh && echo 'VAT is 20%, not 2%' > CHANGES`
	tryFail  = "exit 1"
)

// tryProject adds a project of its own named name, with price.sh and
// check.sh, and returns its path (addProject: it goes at the test's end).
func tryProject(t *testing.T, name string) string {
	t.Helper()
	return addProject(t, name, map[string]string{"price.sh": tryPrice, "check.sh": tryCheck})
}

// sandboxesOf is the names of project's sandboxes, as `sandboxctl list`
// gives them (from ListSandboxes).
func sandboxesOf(t *testing.T, project string) []string {
	t.Helper()
	var list []struct{ ID, Name, Project string }
	if err := json.Unmarshal([]byte(ok(t, "list", "--json")), &list); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range list {
		if s.Project == project {
			names = append(names, s.Name)
		}
	}
	slices.Sort(names)
	return names
}

// projectUnchanged fails the test unless the project has its two files,
// as they were, and nothing else.
func projectUnchanged(t *testing.T, path string) {
	t.Helper()
	entries, _ := os.ReadDir(path)
	var files []string
	for _, e := range entries {
		files = append(files, e.Name())
	}
	price, _ := os.ReadFile(filepath.Join(path, "price.sh"))
	if strings.Join(files, " ") != "check.sh price.sh" || string(price) != tryPrice {
		t.Errorf("the project changed: files %v, price.sh %q", files, price)
	}
}

func TestTryKeepsTheWinnerAndShowsEachVariant(t *testing.T) {
	path := tryProject(t, "try-vat")
	// Another sandbox of the project, not try's: it must stay.
	ok(t, "create", "--name", "bystander", "try-vat")

	out, errOut, code := ctl(t, "", "try", "try-vat", "--check", "sh check.sh", "--name", "fix", "--verbose",
		"--variant", tryWrong, "--variant", tryRight, "--variant", tryFail)
	t.Logf("$ sandboxctl try try-vat --check 'sh check.sh' --name fix --verbose ...\n%s%s", out, errOut)
	if code != 0 {
		t.Fatalf("try: exit %d; want 0", code)
	}
	for _, want := range []string{
		// --verbose: each command's and check's output, under its name.
		"== fix-1: fail (check: exit 1)\n-- command: " + tryWrong + "\n(no output)\n-- check: sh check.sh\n1000 cents with VAT: 1120\n",
		"== fix-2: pass\n",
		"1000 cents with VAT: 1200\n",
		"== fix-3: fail (command: exit 1)\n-- command: exit 1\n(no output)\n\n",
		// The winner, and what to do with it.
		"\nwinner: fix-2 ",
		"\npromote it with: sandboxctl promote fix-2\n",
		"\nkept fix-2; destroyed the other 2\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("try's output lacks %q", want)
		}
	}
	if strings.Contains(out, "== fix-3: fail (command: exit 1)\n-- command: exit 1\n(no output)\n-- check") {
		t.Errorf("the check ran after a command that failed")
	}
	// The table: a row each, pass or fail and how, the time, the paths
	// changed (the winner wrote price.sh and CHANGES), what it wrote and
	// its memory peak: a shell or two, some MiB.
	for _, row := range []string{
		`^NAME\s+VARIANT\s+RESULT\s+TIME\s+DIFF\s+DISK\s+PEAK$`,
		`^fix-1\s+echo 'echo \$\(\( \$1 \* 112 / 100 \)\)' > p\S*\.\.\.\s+fail \(check: exit 1\)\s+\d+\.\d\ds\s+1\s+` + trySizes,
		`^fix-2\s+echo 'echo \$\(\( \$1 \* 120 / 100 \)\)' > p\S*\.\.\.\s+pass \(winner\)\s+\d+\.\d\ds\s+2\s+` + trySizes,
		`^fix-3\s+exit 1\s+fail \(command: exit 1\)\s+\d+\.\d\ds\s+0\s+` + trySizes,
	} {
		m := regexp.MustCompile(`(?m)` + row).FindStringSubmatch(out)
		if m == nil {
			t.Errorf("try's table has no row matching %s", row)
			continue
		}
		if len(m) < 2 {
			continue // the header, which captures no PEAK
		}
		if peak := sizeOf(t, m[1]); peak == 0 || peak >= 40<<20 {
			t.Errorf("%s has PEAK %s; want some, below 40 MiB", m[0][:5], m[1])
		}
	}

	// The losers are gone, the winner and the bystander stay; the
	// winner has the fix, the project does not.
	if got := strings.Join(sandboxesOf(t, "try-vat"), " "); got != "bystander fix-2" {
		t.Errorf("sandboxes after try: %s; want bystander fix-2", got)
	}
	if out := ok(t, "exec", "fix-2", "--", "sh", "-c", "sh check.sh && cat CHANGES"); out != "1000 cents with VAT: 1200\nVAT is 20%, not 2%\n" {
		t.Errorf("the winner's check and note: %q", out)
	}
	if out := ok(t, "diff", "fix-2"); out != "A CHANGES\nM price.sh\n" && out != "M price.sh\nA CHANGES\n" {
		t.Errorf("the winner's diff: %q", out)
	}
	projectUnchanged(t, path)
}

// trySizes matches the DISK and PEAK columns of try's table, PEAK
// captured: "-" where it is not counted, "512 B", "16.0 KiB", "3.5 MiB".
const trySizes = `(?:-|\d+ B|\d+\.\d [KMGT]iB)\s+(\d+ B|\d+\.\d [KMGT]iB)$`

// sizeOf reads a size as sandboxctl prints it ("512 B", "3.5 MiB") back
// into bytes, to a tenth of its unit.
func sizeOf(t *testing.T, text string) uint64 {
	t.Helper()
	var n float64
	var unit string
	if _, err := fmt.Sscanf(text, "%g %s", &n, &unit); err != nil {
		t.Fatalf("size %q: %v", text, err)
	}
	i := strings.Index("BKMGT", unit[:1])
	if i < 0 {
		t.Fatalf("size %q: unknown unit", text)
	}
	return uint64(n * float64(uint64(1)<<(10*i)))
}

func TestTryShowsEachSandboxsMemoryPeak(t *testing.T) {
	tryProject(t, "try-peak")
	// tail keeps its input until it has ten lines: /dev/zero has none,
	// so it holds all it read.
	out := ok(t, "try", "try-peak", "--check", "true", "--name", "peak", "--keep", "none",
		"--variant", `head -c "$SANDBOX_INPUT" /dev/zero | tail >/dev/null`, "--input", "50M", "--input", "1K")
	t.Logf("$ sandboxctl try try-peak --variant 'head -c \"$SANDBOX_INPUT\" /dev/zero | tail >/dev/null' --input 50M --input 1K ...\n%s", out)
	for _, want := range []struct {
		row        string
		least, max uint64
	}{
		{`^peak-1\s+50M\s+pass.*\s+` + trySizes, 40 << 20, 256 << 20},
		{`^peak-2\s+1K\s+pass.*\s+` + trySizes, 1, 40 << 20},
	} {
		m := regexp.MustCompile(`(?m)` + want.row).FindStringSubmatch(out)
		if m == nil {
			t.Errorf("try's table has no row matching %s", want.row)
			continue
		}
		if peak := sizeOf(t, m[1]); peak < want.least || peak >= want.max {
			t.Errorf("%s: PEAK %s; want %d to %d MiB", m[0][:6], m[1], want.least>>20, want.max>>20)
		}
	}
}

func TestTryWithNoneThatPassesExits1AndKeepsNothing(t *testing.T) {
	path := tryProject(t, "try-none")
	out, errOut, code := ctl(t, "", "try", "try-none", "--check", "sh check.sh", "--name", "nope",
		"--variant", tryWrong, "--variant", tryFail)
	t.Logf("$ sandboxctl try try-none ...\n%s%s", out, errOut)
	if code != 1 || !strings.Contains(errOut, "no variant passed the check") {
		t.Errorf("try with no fix that works: exit %d, stderr %q; want exit 1 saying no variant passed", code, errOut)
	}
	if strings.Contains(out, "winner") || !strings.Contains(out, "\ndestroyed all 2 sandboxes\n") ||
		!regexp.MustCompile(`(?m)^nope-1\s.*fail \(check: exit 1\)`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^nope-2\s.*fail \(command: exit 1\)`).MatchString(out) {
		t.Errorf("try's output with no winner:\n%s", out)
	}
	if left := sandboxesOf(t, "try-none"); len(left) != 0 {
		t.Errorf("sandboxes left: %v", left)
	}
	projectUnchanged(t, path)
}

func TestTryKeepNoneAndJSONWithInputs(t *testing.T) {
	path := tryProject(t, "try-json")

	// --keep none: the winner is named, and destroyed with the rest.
	out := ok(t, "try", "try-json", "--check", "sh check.sh", "--name", "gone", "--keep", "none", "--variant", tryRight, "--variant", tryWrong)
	if !strings.Contains(out, "\nwinner: gone-1 ") || strings.Contains(out, "promote it with") || !strings.Contains(out, "\ndestroyed all 2 sandboxes\n") {
		t.Errorf("try --keep none:\n%s", out)
	}
	if left := sandboxesOf(t, "try-json"); len(left) != 0 {
		t.Errorf("sandboxes left after --keep none: %v", left)
	}

	// --quiet: the winner's name alone.
	if out := ok(t, "-q", "try", "try-json", "--check", "sh check.sh", "--name", "q", "--variant", tryWrong, "--variant", tryRight); out != "q-2\n" {
		t.Errorf("try --quiet: %q; want the winner's name", out)
	}
	ok(t, "destroy", "q-2")

	// One command, two inputs, both right: the faster one wins though it
	// comes second. --keep all keeps both.
	fix := `sleep "$SANDBOX_INPUT"; ` + tryRight
	out = ok(t, "--json", "try", "try-json", "--check", "sh check.sh", "--name", "in", "--keep", "all", "--variant", fix, "--input", "2", "--input", "0")
	var rows []struct {
		Name, ID, Command, Result string
		Input                     *string
		Passed, Winner, Kept      bool
		Seconds                   float64
		CommandSeconds            float64 `json:"command_seconds"`
		Changed                   *int
		MemoryPeak                *uint64 `json:"memory_peak"`
	}
	if err := json.Unmarshal([]byte(out), &rows); err != nil || len(rows) != 2 {
		t.Fatalf("try --json: %v:\n%s", err, out)
	}
	for i, want := range []struct {
		name, input string
		winner      bool
	}{{"in-1", "2", false}, {"in-2", "0", true}} {
		r := rows[i]
		if r.Name != want.name || r.Input == nil || *r.Input != want.input || r.Command != fix || !r.Passed || r.Result != "pass" ||
			r.Winner != want.winner || !r.Kept || r.Changed == nil || *r.Changed != 2 || len(r.ID) != 12 {
			t.Errorf("try --json row %d: %+v; want %s, input %s, passed, winner %v, kept, 2 paths changed", i, r, want.name, want.input, want.winner)
		}
	}
	for i, r := range rows {
		// A sleep and two shells.
		if r.MemoryPeak == nil || *r.MemoryPeak == 0 || *r.MemoryPeak >= 40<<20 {
			t.Errorf("try --json row %d: memory_peak %v; want some bytes, below 40 MiB", i, r.MemoryPeak)
		}
	}
	if rows[0].CommandSeconds < 2 || rows[0].Seconds <= rows[1].Seconds {
		t.Errorf("times: %v and %v; want the first over 2s and the slower", rows[0].Seconds, rows[1].Seconds)
	}
	if got := strings.Join(sandboxesOf(t, "try-json"), " "); got != "in-1 in-2" {
		t.Errorf("sandboxes after --keep all: %s", got)
	}
	projectUnchanged(t, path)
}

func TestTryCleansUpAfterCtrlCAndErrors(t *testing.T) {
	tryProject(t, "try-stop")

	// Ctrl-C while the commands run: they stop, try's sandboxes go.
	cmd := exec.Command(ctlBin(), "try", "try-stop", "--check", "true", "--name", "int", "--variant", "sleep 60", "--variant", "sleep 60")
	var errOut strings.Builder
	cmd.Stderr = &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for len(sandboxesOf(t, "try-stop")) < 2 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond) // the commands start
	begin := time.Now()
	_ = cmd.Process.Signal(syscall.SIGINT) // the sandboxctl this test started
	err := cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 130 || time.Since(begin) > 15*time.Second ||
		!strings.Contains(errOut.String(), "interrupted; destroyed the sandboxes try made: int-1, int-2") {
		t.Errorf("try after Ctrl-C: %v after %v, stderr %q; want exit 130 at once, saying what it destroyed", err, time.Since(begin), errOut.String())
	}
	if left := sandboxesOf(t, "try-stop"); len(left) != 0 {
		t.Errorf("sandboxes left after Ctrl-C: %v", left)
	}

	// A name taken by another sandbox: try stops, destroys what it made,
	// and leaves the other sandbox be.
	ok(t, "create", "--name", "clash-2", "try-stop")
	out, said, code := ctl(t, "", "try", "try-stop", "--check", "true", "--name", "clash", "--parallel", "1",
		"--variant", "true", "--variant", "true", "--variant", "true")
	t.Logf("$ sandboxctl try try-stop --name clash --parallel 1 ... (clash-2 exists)\n%s%s", out, said)
	if code != 5 || !strings.Contains(said, `a sandbox named "clash-2" exists`) || !strings.Contains(said, "destroyed the sandboxes try made: clash-1\n") {
		t.Errorf("try with a name taken: exit %d, %q; want exit 5 naming the clash and what it destroyed", code, said)
	}
	if got := strings.Join(sandboxesOf(t, "try-stop"), " "); got != "clash-2" {
		t.Errorf("sandboxes after a name clash: %s; want clash-2 alone", got)
	}

	// The usual codes.
	fails(t, 2, `try needs --check`, "try", "try-stop", "--variant", "true")
	fails(t, 2, `--keep some: want winner, all or none`, "try", "try-stop", "--check", "true", "--variant", "true", "--keep", "some")
	fails(t, 3, `(?s)nosuch.*see .sandboxctl project list.`, "try", "nosuch", "--check", "true", "--variant", "true", "--variant", "false")
	testbed.MustRun(t, "systemctl", "stop", "sandboxd.service")
	fails(t, 6, "systemctl start sandboxd", "try", "try-stop", "--check", "true", "--variant", "true")
	testbed.MustRun(t, "systemctl", "start", "sandboxd.service")
	nobody := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
		ctlBin(), "try", "try-stop", "--check", "true", "--variant", "true")
	refused, _ := nobody.CombinedOutput()
	if nobody.ProcessState.ExitCode() != 4 || !strings.Contains(string(refused), "group sandboxd") {
		t.Errorf("try as nobody: exit %d: %s", nobody.ProcessState.ExitCode(), refused)
	}
	if got := strings.Join(sandboxesOf(t, "try-stop"), " "); got != "clash-2" {
		t.Errorf("sandboxes after the refusals: %s; want clash-2 alone", got)
	}
}
