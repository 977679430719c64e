package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/sandboxd1"
	"github.com/sandboxd/sandboxd/tests/testbed"
)

// calcPy is a 12-line calc.py with the lines of edits replaced.
func calcPy(edits map[int]string) string {
	var b strings.Builder
	for i := 1; i <= 12; i++ {
		if e, ok := edits[i]; ok {
			b.WriteString(e + "\n")
			continue
		}
		fmt.Fprintf(&b, "def f%d(x): return x + %d\n", i, i)
	}
	return b.String()
}

// A conflict an agent resolves: two sandboxes edit line 10 of calc.py;
// the project, on the host, edits line 2. A rebase refuses the path;
// `versions` shows the base's, the project's and the sandbox's; `merge`
// writes the clean merge (both edits in the sandbox's file). When the
// project edits line 10 too, `merge` names the conflicting hunk (its
// lines and the three texts), exits 5 and leaves the file as it was;
// --markers writes it with conflict markers. A rebase after the clean
// merge takes calc.py; after the markers it still refuses it. A symlink planted at the
// path (to /etc/shadow) is refused, never followed: first a regular file
// is read, the control.
func TestCLIConflictVersionsAndMerge(t *testing.T) {
	base := calcPy(nil)
	path := addProject(t, "conflicts", map[string]string{"calc.py": base})
	clean := strings.TrimSpace(ok(t, "create", "--quiet", "conflicts"))
	conflicting := strings.TrimSpace(ok(t, "create", "--quiet", "conflicts"))
	for _, id := range []string{clean, conflicting} {
		ok(t, "exec", id, "--", "sed", "-i", "10s/.*/def f10(x): return x * 10  # sandbox/", "calc.py")
	}
	sandbox := calcPy(map[int]string{10: "def f10(x): return x * 10  # sandbox"})
	project := calcPy(map[int]string{2: "def f2(x): return x - 2  # project"})
	if err := os.WriteFile(filepath.Join(path, "calc.py"), []byte(project), 0o644); err != nil {
		t.Fatal(err)
	}
	fails(t, 5, `calc\.py`, "rebase", clean)

	// The three versions, each alone as it is, and together.
	for which, want := range map[string]string{"base": base, "project": project, "sandbox": sandbox} {
		if out := ok(t, "versions", clean, "calc.py", "--which", which); out != want {
			t.Errorf("versions --which %s:\n%s\nwant:\n%s", which, out, want)
		}
	}
	all := ok(t, "versions", clean, "calc.py")
	t.Logf("$ sandboxctl versions %s calc.py\n%s", clean, all)
	for _, want := range []string{"=== base: calc.py", "=== project: calc.py", "=== sandbox: calc.py", "x - 2  # project", "x * 10  # sandbox"} {
		if !strings.Contains(all, want) {
			t.Errorf("versions lacks %q:\n%s", want, all)
		}
	}

	// A path is the project's, relative, as the conflict named it.
	for _, p := range []string{"/etc/shadow", "../calc.py"} {
		fails(t, 2, `relative to the project's top`, "versions", clean, p)
	}

	// The clean merge is written into the sandbox.
	if out := ok(t, "merge", clean, "calc.py"); !strings.Contains(out, "merged calc.py") {
		t.Errorf("merge: %s", out)
	}
	both := calcPy(map[int]string{2: "def f2(x): return x - 2  # project", 10: "def f10(x): return x * 10  # sandbox"})
	if out := ok(t, "exec", clean, "--", "cat", "calc.py"); out != both {
		t.Errorf("calc.py in the sandbox after a clean merge:\n%s\nwant both edits:\n%s", out, both)
	}
	// The merge resolved the conflict: the rebase takes calc.py now, as
	// the sandbox has it.
	ok(t, "rebase", clean)
	if out := ok(t, "exec", clean, "--", "cat", "calc.py"); out != both {
		t.Errorf("calc.py in the sandbox after the rebase:\n%s\nwant both edits:\n%s", out, both)
	}

	// The project edits line 10 too: a conflict, named, the file kept.
	project = calcPy(map[int]string{2: "def f2(x): return x - 2  # project", 10: "def f10(x): return x + 100  # project"})
	if err := os.WriteFile(filepath.Join(path, "calc.py"), []byte(project), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := ctl(t, "", "merge", conflicting, "calc.py")
	t.Logf("$ sandboxctl merge %s calc.py\n%s%s", conflicting, out, errOut)
	if code != 5 || !strings.Contains(errOut, "1 hunk changed in both") || !strings.Contains(out, "sandbox, line 10") ||
		!strings.Contains(out, "x + 100  # project") || !strings.Contains(out, "base, line 10") {
		t.Errorf("merge of a conflict: exit %d, stdout:\n%s\nstderr: %s\nwant exit 5 naming line 10 and the three texts", code, out, errOut)
	}
	var res struct {
		Clean, Written bool
		Hunks          []sandboxd1.MergeHunk
	}
	jsonOut, _, _ := ctl(t, "", "--json", "merge", conflicting, "calc.py")
	if err := json.Unmarshal([]byte(jsonOut), &res); err != nil {
		t.Fatalf("merge --json: %v: %s", err, jsonOut)
	}
	if res.Clean || res.Written || len(res.Hunks) != 1 || res.Hunks[0].SandboxStart != 10 || res.Hunks[0].ProjectStart != 10 ||
		res.Hunks[0].Project != "def f10(x): return x + 100  # project\n" || res.Hunks[0].Base != "def f10(x): return x + 10\n" {
		t.Errorf("merge --json of a conflict: %+v", res)
	}
	if out := ok(t, "exec", conflicting, "--", "cat", "calc.py"); out != sandbox {
		t.Errorf("calc.py after a conflicting merge changed:\n%s", out)
	}
	ok(t, "merge", "--markers", conflicting, "calc.py")
	if out := ok(t, "exec", conflicting, "--", "cat", "calc.py"); !strings.Contains(out, "<<<<<<< sandbox\ndef f10(x): return x * 10  # sandbox\n=======\ndef f10(x): return x + 100  # project\n>>>>>>> project\n") ||
		!strings.Contains(out, "x - 2  # project") {
		t.Errorf("calc.py after merge --markers:\n%s", out)
	}
	fails(t, 5, `calc\.py`, "rebase", conflicting) // markers resolve nothing

	// A symlink planted at the path, and one on the way: named, never
	// followed, never merged.
	ok(t, "exec", conflicting, "--", "sh", "-c", "rm calc.py && ln -s /etc/shadow calc.py && ln -s /etc etc")
	for _, p := range []string{"calc.py", "etc/shadow"} {
		out, errOut, code := ctl(t, "", "versions", conflicting, p, "--which", "sandbox")
		if code == 0 || !strings.Contains(errOut, "symlink") || strings.Contains(out, "root:") {
			t.Errorf("versions --which sandbox of %s, a symlink to /etc/shadow: exit %d, %q %q; want a refusal naming the symlink", p, code, out, errOut)
		}
	}
	if all := ok(t, "versions", conflicting, "calc.py"); !strings.Contains(all, "=== sandbox: symlink") || strings.Contains(all, "root:") {
		t.Errorf("versions of a symlink to /etc/shadow:\n%s", all)
	}
	if out, errOut, code := ctl(t, "", "merge", conflicting, "calc.py"); code == 0 || !strings.Contains(errOut, "symlink") {
		t.Errorf("merge of a symlink to /etc/shadow: exit %d, %q %q; want a refusal", code, out, errOut)
	}
	if target := ok(t, "exec", conflicting, "--", "readlink", "calc.py"); target != "/etc/shadow\n" {
		t.Errorf("the planted symlink after a refused merge: %q", target)
	}
}

// The versions are read for the caller, and the merge is written as the
// caller: alice, who owns her project, sees none of a file only root may
// read (neither the base's, nor the project's, nor her sandbox's copy),
// while root, the control, sees it; her clean merge leaves calc.py hers
// in her sandbox, with both edits.
func TestHostileConflictVersionsAreReadAndMergedAsTheCaller(t *testing.T) {
	accessUsers(t)
	proj := accessProject(t, "acc-conflicts", accAlice+":"+accAlice, 0o755, map[string]os.FileMode{"secret.txt": 0o600})
	calc := filepath.Join(proj, "calc.py")
	if err := os.WriteFile(calc, []byte(calcPy(nil)), 0o644); err != nil {
		t.Fatal(err)
	}
	testbed.MustRun(t, "chown", accAlice+":"+accAlice, calc)
	reconfigure(t, fmt.Sprintf("[[project]]\nname = \"conflicting\"\npath = %q\n", proj))
	accDestroyAtEnd(t, "conflicting")
	id := strings.TrimSpace(accOK(t, accAlice, "create", "--quiet", "conflicting"))
	accOK(t, accAlice, "exec", id, "--", "sed", "-i", "10s/.*/def f10(x): return x * 10  # alice/", "calc.py")
	if err := os.WriteFile(calc, []byte(calcPy(map[int]string{2: "def f2(x): return x - 2  # host"})), 0o644); err != nil {
		t.Fatal(err)
	}

	if out := ok(t, "versions", id, "secret.txt"); strings.Count(out, "secret.txt of acc-conflicts") != 3 {
		t.Fatalf("versions of secret.txt as root (the control):\n%s", out)
	}
	out := accOK(t, accAlice, "versions", id, "secret.txt")
	if strings.Contains(out, "secret.txt of") || strings.Count(out, ": unreadable (not readable by uid "+accUID(t, accAlice)) != 3 {
		t.Errorf("versions of a root-only file as %s:\n%s\nwant each version unreadable, none shown", accAlice, out)
	}

	accOK(t, accAlice, "merge", id, "calc.py")
	want := calcPy(map[int]string{2: "def f2(x): return x - 2  # host", 10: "def f10(x): return x * 10  # alice"})
	if out := accOK(t, accAlice, "exec", id, "--", "sh", "-c", "stat -c %U calc.py; cat calc.py"); out != accAlice+"\n"+want {
		t.Errorf("calc.py in %s's sandbox after her merge:\n%s\nwant hers, with both edits:\n%s", accAlice, out, want)
	}
}

// Over MCP: conflict_versions gives the three versions as text (a binary
// file as base64), merge with dry_run says what it would write and
// writes nothing, a clean merge is written, and a conflicting one comes
// back as its hunk, the file left alone.
func TestMCPConflictVersionsAndMerge(t *testing.T) {
	path := addProject(t, "mcp-conflicts", map[string]string{"calc.py": calcPy(nil), "blob.bin": "a\x00a"})
	cs, _, _ := mcpSession(t)
	var sb struct{ ID string }
	toolOK(t, cs, "sandbox_create", map[string]any{"project": "mcp-conflicts"}, &sb)
	t.Cleanup(func() { ctl(t, "", "destroy", sb.ID) })
	ok(t, "exec", sb.ID, "--", "sh", "-c", `sed -i "10s/.*/def f10(x): return x * 10  # agent/" calc.py && printf 'a\0b' > blob.bin && echo new > new.txt`)
	project := calcPy(map[int]string{2: "def f2(x): return x - 2  # host"})
	if err := os.WriteFile(filepath.Join(path, "calc.py"), []byte(project), 0o644); err != nil {
		t.Fatal(err)
	}

	type version struct{ Which, Kind, Encoding string }
	var vs struct{ Versions []version }
	toolOK(t, cs, "conflict_versions", map[string]any{"sandbox": sb.ID, "path": "calc.py"}, &vs)
	want := []version{{"base", "file", "utf-8"}, {"project", "file", "utf-8"}, {"sandbox", "file", "utf-8"}}
	if !reflect.DeepEqual(vs.Versions, want) {
		t.Errorf("conflict_versions of calc.py: %+v\nwant %+v", vs.Versions, want)
	}
	// The contents come once, in the text, each under a line naming it.
	sandbox := calcPy(map[int]string{10: "def f10(x): return x * 10  # agent"})
	text := toolText(callTool(t, cs, "conflict_versions", map[string]any{"sandbox": sb.ID, "path": "calc.py"}))
	if wantText := "--- base: calc.py, 294 bytes, utf-8 ---\n" + calcPy(nil) + "--- project: calc.py, 302 bytes, utf-8 ---\n" + project +
		"--- sandbox: calc.py, 303 bytes, utf-8 ---\n" + sandbox; text != wantText {
		t.Errorf("conflict_versions' text:\n%s\nwant:\n%s", text, wantText)
	}
	text = toolText(callTool(t, cs, "conflict_versions", map[string]any{"sandbox": sb.ID, "path": "blob.bin"}))
	if !strings.Contains(text, "--- base: blob.bin, 3 bytes, base64 ---\nYQBh\n") || !strings.Contains(text, "--- sandbox: blob.bin, 3 bytes, base64 ---\nYQBi\n") {
		t.Errorf("conflict_versions of a binary file the sandbox changed:\n%s", text)
	}
	text = toolText(callTool(t, cs, "conflict_versions", map[string]any{"sandbox": sb.ID, "path": "new.txt"}))
	if !strings.Contains(text, "--- base: absent") || !strings.Contains(text, "--- project: absent") || !strings.HasSuffix(text, "utf-8 ---\nnew\n") {
		t.Errorf("conflict_versions of a file only the sandbox made:\n%s", text)
	}

	var merged struct {
		Clean, Written bool
		Hunks          []struct {
			Sandbox, Base, Project struct {
				Start, Lines int
				Text         string
			}
		}
	}
	both := calcPy(map[int]string{2: "def f2(x): return x - 2  # host", 10: "def f10(x): return x * 10  # agent"})
	toolOK(t, cs, "merge", map[string]any{"sandbox": sb.ID, "path": "calc.py", "dry_run": true}, &merged)
	if !merged.Clean || merged.Written {
		t.Errorf("merge dry_run: %+v", merged)
	}
	if text := toolText(callTool(t, cs, "merge", map[string]any{"sandbox": sb.ID, "path": "calc.py", "dry_run": true})); text != "calc.py merged (dry run, nothing written): clean\n--- merged ---\n"+both {
		t.Errorf("merge dry_run's text:\n%s\nwant the merged text", text)
	}
	if out := ok(t, "exec", sb.ID, "--", "cat", "calc.py"); out != sandbox {
		t.Errorf("calc.py after a dry run changed:\n%s", out)
	}
	toolFails(t, cs, "merge", map[string]any{"sandbox": sb.ID, "path": "blob.bin"}, `version is binary`)
	toolFails(t, cs, "merge", map[string]any{"sandbox": sb.ID, "path": "new.txt"}, `only the sandbox has it`)

	// The host edits line 10 too: the hunk comes back, the file stays.
	project = calcPy(map[int]string{2: "def f2(x): return x - 2  # host", 10: "def f10(x): return x + 100  # host"})
	if err := os.WriteFile(filepath.Join(path, "calc.py"), []byte(project), 0o644); err != nil {
		t.Fatal(err)
	}
	toolOK(t, cs, "merge", map[string]any{"sandbox": sb.ID, "path": "calc.py"}, &merged)
	if merged.Clean || merged.Written || len(merged.Hunks) != 1 || merged.Hunks[0].Project.Start != 10 ||
		merged.Hunks[0].Project.Text != "def f10(x): return x + 100  # host\n" || merged.Hunks[0].Sandbox.Text != "def f10(x): return x * 10  # agent\n" {
		t.Errorf("merge of a conflict: %+v", merged)
	}
	if out := ok(t, "exec", sb.ID, "--", "cat", "calc.py"); out != sandbox {
		t.Errorf("calc.py after a conflicting merge changed:\n%s", out)
	}
	// Without the conflict the merge is written.
	if err := os.WriteFile(filepath.Join(path, "calc.py"), []byte(calcPy(map[int]string{2: "def f2(x): return x - 2  # host"})), 0o644); err != nil {
		t.Fatal(err)
	}
	toolOK(t, cs, "merge", map[string]any{"sandbox": sb.ID, "path": "calc.py"}, &merged)
	if out := ok(t, "exec", sb.ID, "--", "cat", "calc.py"); !merged.Clean || !merged.Written || out != both {
		t.Errorf("a clean merge: %+v; calc.py:\n%s", merged, out)
	}
}

// The MCP inspector CLI (a client nobody on the project wrote), in both
// protocol eras, sees a conflict's three versions and merges it.
func TestMCPInspectorConflictVersionsAndMerge(t *testing.T) {
	for _, era := range []string{"modern", "legacy"} {
		t.Run(era, func(t *testing.T) {
			project := "insp-conflicts-" + era
			path := addProject(t, project, map[string]string{"calc.py": calcPy(nil)})
			id := strings.TrimSpace(ok(t, "create", "--quiet", project))
			ok(t, "exec", id, "--", "sed", "-i", "10s/.*/def f10(x): return x * 10  # agent/", "calc.py")
			project2 := calcPy(map[int]string{2: "def f2(x): return x - 2  # host"})
			if err := os.WriteFile(filepath.Join(path, "calc.py"), []byte(project2), 0o644); err != nil {
				t.Fatal(err)
			}
			in := inspector(t, era)
			res := inspect(t, in, nil, "conflict_versions", "sandbox="+id, "path=calc.py")
			text := res.Text()
			for _, want := range []string{"--- base: calc.py, 294 bytes, utf-8 ---\n", "--- project: calc.py, 302 bytes, utf-8 ---\n", "x - 2  # host\n",
				"--- sandbox: calc.py, 303 bytes, utf-8 ---\n", "x * 10  # agent\n"} {
				if !strings.Contains(text, want) {
					t.Errorf("conflict_versions from the inspector (%s era) lacks %q:\n%s", era, want, text)
				}
			}
			var merged struct{ Clean, Written bool }
			inspect(t, in, &merged, "merge", "sandbox="+id, "path=calc.py")
			both := calcPy(map[int]string{2: "def f2(x): return x - 2  # host", 10: "def f10(x): return x * 10  # agent"})
			if out := ok(t, "exec", id, "--", "cat", "calc.py"); !merged.Clean || !merged.Written || out != both {
				t.Errorf("merge from the inspector (%s era): %+v; calc.py:\n%s", era, merged, out)
			}
		})
	}
}
