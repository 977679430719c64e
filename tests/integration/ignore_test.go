package integration

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/tests/testbed"
)

// What the project's ignore rules leave out (issue 29, "What promotion
// carries"): diff, try and promotion leave those paths out and say how
// many.

var leftOutRe = regexp.MustCompile(`(?m)^(\d+) paths? left out by ignore rules \(\.sandboxignore\)$`)

// leftOut is the count a sandboxctl output says was left out (0: none said).
func leftOut(out string) int {
	m := leftOutRe.FindStringSubmatch(out)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// promotionIgnored reads a promotion record's ignored count.
func promotionIgnored(t *testing.T, pid string) int {
	t.Helper()
	var p struct {
		State   string
		Ignored int
	}
	if err := json.Unmarshal([]byte(ok(t, "--json", "promotions", pid)), &p); err != nil {
		t.Fatal(err)
	}
	if p.State != "done" {
		t.Fatalf("promotion %s: %s", pid, p.State)
	}
	return p.Ignored
}

// A Python project whose .gitignore lists __pycache__ and *.pyc: its
// sandbox imports the module (Python writes __pycache__ beside it) and
// fixes it with sed. diff lists the fix, not the bytecode, and says how
// many paths it left out; try's column says it too; promotion carries the
// fix and leaves the host's project without a __pycache__.
func TestPythonBytecodeNeverLeavesTheSandbox(t *testing.T) {
	path := addProject(t, "pyign", map[string]string{
		".gitignore":   "__pycache__/\n*.pyc\n",
		"calc.py":      "def add(a, b):\n    return a - b\n",
		"test_calc.py": "import calc\nassert calc.add(2, 3) == 5, 'add is wrong'\n",
	})
	id := strings.TrimSpace(ok(t, "create", "--quiet", "pyign"))
	ok(t, "exec", id, "--", "sh", "-c", "sed -i 's/a - b/a + b/' calc.py && /usr/bin/python3 test_calc.py && test -d __pycache__ && ls __pycache__ | grep -q '^calc\\..*\\.pyc$'")

	out := ok(t, "diff", id)
	if !strings.Contains(out, "M calc.py") || strings.Contains(out, "__pycache__") || strings.Contains(out, ".pyc") {
		t.Errorf("sandboxctl diff lists the bytecode, or not the fix:\n%s", out)
	}
	if n := leftOut(out); n < 1 {
		t.Errorf("sandboxctl diff does not say what it left out:\n%s", out)
	}
	if text, errOut, code := ctl(t, "", "diff", "-u", id); code != 0 || strings.Contains(text, "__pycache__") || !strings.Contains(text, "+    return a + b") || leftOut(errOut) < 1 {
		t.Errorf("sandboxctl diff -u: exit %d\n%s\nstderr: %s", code, text, errOut)
	}

	// MCP's diff tool returns the count, in both forms.
	cs, _, _ := mcpSession(t)
	for _, text := range []bool{false, true} {
		var diff struct {
			Changes []struct{ Path string }
			Text    string
			Ignored int
		}
		toolOK(t, cs, "diff", map[string]any{"sandbox": id, "text": text}, &diff)
		if diff.Ignored < 1 || (!text && (len(diff.Changes) != 1 || diff.Changes[0].Path != "calc.py")) || strings.Contains(diff.Text, "__pycache__") {
			t.Errorf("MCP diff (text %v): %+v; want calc.py alone and the bytecode counted as left out", text, diff)
		}
	}

	// try's diff column: one change, the bytecode left out.
	tryOut := ok(t, "try", "pyign", "--keep", "none", "--name", "pyign", "--check", "/usr/bin/python3 test_calc.py",
		"--variant", "sed -i 's/a - b/a + b/' calc.py")
	if !regexp.MustCompile(`\b1 \(\d+ left out\)`).MatchString(tryOut) {
		t.Errorf("sandboxctl try's diff column does not say what it left out:\n%s", tryOut)
	}

	out = ok(t, "promote", id)
	if n := leftOut(out); n < 1 {
		t.Errorf("sandboxctl promote does not say what it left out:\n%s", out)
	}
	if n := promotionIgnored(t, promotionIDRe.FindStringSubmatch(out)[1]); n < 1 {
		t.Errorf("the promotion's record says %d paths were left out", n)
	}
	if data, err := os.ReadFile(filepath.Join(path, "calc.py")); err != nil || !strings.Contains(string(data), "a + b") {
		t.Errorf("the host's calc.py after the promotion: %q, %v", data, err)
	}
	if _, err := os.Lstat(filepath.Join(path, "__pycache__")); !os.IsNotExist(err) {
		t.Errorf("the host's project has a __pycache__ after the promotion: %v", err)
	}
}

// [[project]] ignore in sandboxd.toml: its patterns leave paths out of
// the project's sandboxes' diff and promotion (no .gitignore here, so
// no default applies: a __pycache__ goes as any directory).
func TestConfiguredIgnorePatternsLeavePathsOut(t *testing.T) {
	tb := install(t)
	name := "cfgign"
	path := filepath.Join(tb.Btrfs.Mount, name)
	testbed.MustRun(t, "btrfs", "subvolume", "create", path)
	t.Cleanup(func() { _ = exec.Command("btrfs", "subvolume", "delete", path).Run() })
	if err := os.WriteFile(filepath.Join(path, "main.txt"), []byte("v1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	reconfigure(t, "[[project]]\nname = \""+name+"\"\npath = \""+path+"\"\nignore = [\"*.tmp\", \"/build/\"]\n")
	t.Cleanup(func() {
		for _, s := range sandboxIDsOf(t, name) {
			ctl(t, "", "destroy", s)
		}
	})
	id := strings.TrimSpace(ok(t, "create", "--quiet", name))
	ok(t, "exec", id, "--", "sh", "-c", "echo v2 > main.txt && echo x > scratch.tmp && mkdir -p build/out sub/build __pycache__ && echo o > build/out/a && echo k > sub/build/kept && echo c > __pycache__/c")

	out := ok(t, "diff", id)
	for _, want := range []string{"M main.txt", "A sub/build/kept", "A __pycache__/c"} {
		if !strings.Contains(out, want) {
			t.Errorf("sandboxctl diff does not list %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "scratch.tmp") || strings.Contains(out, " build/") || leftOut(out) != 4 {
		t.Errorf("sandboxctl diff: want scratch.tmp and build/ (4 paths: build, build/out, build/out/a, scratch.tmp) left out:\n%s", out)
	}
	out = ok(t, "promote", id)
	if leftOut(out) != 4 {
		t.Errorf("sandboxctl promote: want 4 paths left out:\n%s", out)
	}
	for _, p := range []string{"scratch.tmp", "build"} {
		if _, err := os.Lstat(filepath.Join(path, p)); !os.IsNotExist(err) {
			t.Errorf("%s reached the host: %v", p, err)
		}
	}
	for file, want := range map[string]string{"main.txt": "v2\n", "sub/build/kept": "k\n", "__pycache__/c": "c\n"} {
		if data, err := os.ReadFile(filepath.Join(path, file)); err != nil || string(data) != want {
			t.Errorf("the host's %s: %q, %v; want %q", file, data, err, want)
		}
	}
}

// A promotion that waits for an admin carries, once approved, the change
// set it was started with: the rules come from the sandbox's base, so a
// change of the host's .sandboxignore meanwhile neither adds to it nor
// breaks its digest.
func TestAnApprovedPromotionLeavesOutWhatItDidWhenStarted(t *testing.T) {
	path := addProject(t, "waitign", map[string]string{".sandboxignore": "*.log\n", "app.txt": "v1\n"})
	reconfigure(t, "\n[[stage]]\nname = \"project\"\ntarget = \"project\"\napproval = \"admin\"\n")
	id := strings.TrimSpace(ok(t, "create", "--quiet", "waitign"))
	ok(t, "exec", id, "--", "sh", "-c", "echo v2 > app.txt && echo noise > run.log")
	out := ok(t, "promote", id)
	if leftOut(out) != 1 || !strings.Contains(out, "waiting") {
		t.Fatalf("sandboxctl promote through an admin's stage: want it waiting, 1 path left out:\n%s", out)
	}
	pid := promotionIDRe.FindStringSubmatch(out)[1]
	if err := os.WriteFile(filepath.Join(path, ".sandboxignore"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	ok(t, "approve", "--yes", pid)
	if n := promotionIgnored(t, pid); n != 1 {
		t.Errorf("the approved promotion's record: %d left out, want 1", n)
	}
	if data, err := os.ReadFile(filepath.Join(path, "app.txt")); err != nil || string(data) != "v2\n" {
		t.Errorf("the host's app.txt after the approval: %q, %v", data, err)
	}
	if _, err := os.Lstat(filepath.Join(path, "run.log")); !os.IsNotExist(err) {
		t.Errorf("run.log reached the host with the approval: %v", err)
	}
}
