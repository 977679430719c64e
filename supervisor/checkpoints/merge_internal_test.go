package checkpoints

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/supervisor"
)

// lines is "1\n2\n...n\n" with the lines of edits replaced.
func lines(n int, edits map[int]string) []byte {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		if e, ok := edits[i]; ok {
			b.WriteString(e + "\n")
			continue
		}
		b.WriteString(strings.Repeat("x", i) + "\n")
	}
	return []byte(b.String())
}

// diff3 merges edits of different lines; edits of one line conflict,
// with each version's lines and text; one edit made on both sides is no
// conflict.
func TestUnitMerge3(t *testing.T) {
	ctx := context.Background()
	base := lines(12, nil)
	sandbox := lines(12, map[int]string{10: "ten sandbox"})
	res, err := merge3(ctx, base, lines(12, map[int]string{2: "two project"}), sandbox)
	if err != nil {
		t.Fatal(err)
	}
	if want := lines(12, map[int]string{2: "two project", 10: "ten sandbox"}); !res.Clean || string(res.Merged) != string(want) || len(res.Hunks) != 0 {
		t.Errorf("a clean merge: %+v; want clean with both edits", res)
	}

	res, err = merge3(ctx, base, lines(12, map[int]string{2: "two project", 10: "ten project"}), sandbox)
	if err != nil {
		t.Fatal(err)
	}
	if res.Clean || len(res.Hunks) != 1 {
		t.Fatalf("a conflict: %+v; want one hunk", res)
	}
	h := res.Hunks[0]
	want := Hunk{Sandbox: LineRange{10, 1}, Base: LineRange{10, 1}, Project: LineRange{10, 1},
		SandboxText: "ten sandbox\n", BaseText: strings.Repeat("x", 10) + "\n", ProjectText: "ten project\n"}
	if h != want {
		t.Errorf("the hunk: %+v; want %+v", h, want)
	}
	if m := string(res.Merged); !strings.Contains(m, "<<<<<<< sandbox\nten sandbox\n=======\nten project\n>>>>>>> project\n") || !strings.Contains(m, "two project\n") {
		t.Errorf("merged with markers:\n%s", m)
	}

	res, err = merge3(ctx, base, lines(12, map[int]string{10: "ten sandbox", 3: "three"}), sandbox)
	if err != nil || !res.Clean {
		t.Errorf("the same edit on both sides: %+v, %v; want clean", res, err)
	}

	// Added on both sides (no base), one of them without a last newline.
	res, err = merge3(ctx, nil, []byte("a\nb"), []byte("c\n"))
	if err != nil || res.Clean || len(res.Hunks) != 1 {
		t.Fatalf("added on both sides: %+v, %v; want one conflicting hunk", res, err)
	}
	if h := res.Hunks[0]; h.ProjectText != "a\nb" || h.SandboxText != "c\n" || h.Base.Count != 0 || h.Project != (LineRange{1, 2}) {
		t.Errorf("added on both sides: %+v", h)
	}
}

// A version is read only when it is a regular file below the tree's top
// reached without a symlink, and only for whom could read it.
func TestUnitReadVersion(t *testing.T) {
	top := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(top, "calc.py"), []byte("print(1)\n"), 0o644))
	must(os.WriteFile(filepath.Join(top, "big"), make([]byte, 100), 0o644))
	must(os.WriteFile(filepath.Join(top, "private"), []byte("secret"), 0o600))
	must(os.Symlink("/etc/shadow", filepath.Join(top, "shadow")))
	must(os.Symlink("/etc", filepath.Join(top, "etc")))
	must(os.Mkdir(filepath.Join(top, "dir"), 0o755))
	daemon := supervisor.Daemon("test")
	for _, c := range []struct {
		path, kind, data string
		truncated        bool
		binary           bool
	}{
		{"calc.py", KindFile, "print(1)\n", false, false},
		{"big", KindFile, strings.Repeat("\x00", 10), true, true},
		{"shadow", KindSymlink, "", false, false},
		{"etc/shadow", KindSymlink, "", false, false},
		{"dir", KindDirectory, "", false, false},
		{"missing", KindAbsent, "", false, false},
		{"calc.py/x", KindAbsent, "", false, false},
	} {
		v, err := readVersion(top, c.path, daemon, 10)
		if err != nil || v.Kind != c.kind || string(v.Data) != c.data || v.Truncated != c.truncated || v.Binary != c.binary {
			t.Errorf("%s: %+v, %v; want %s %q", c.path, v, err, c.kind, c.data)
		}
	}
	if os.Getuid() != 0 {
		return // the file is the test's own: it can read it
	}
	stranger := supervisor.Caller(supervisor.Identity{UID: 4242})
	if v, err := readVersion(top, "private", stranger, 10); err != nil || v.Kind != KindUnreadable || v.Data != nil {
		t.Errorf("a file uid 4242 could not read: %+v, %v; want unreadable", v, err)
	}
	if v, err := readVersion(top, "calc.py", stranger, 10); err != nil || v.Kind != KindFile {
		t.Errorf("a file uid 4242 could read: %+v, %v", v, err)
	}
	// Beneath a directory uid 4242 cannot enter: not even whether there
	// is something, nor its size; the daemon reads it.
	must(os.Mkdir(filepath.Join(top, "shut"), 0o700))
	must(os.WriteFile(filepath.Join(top, "shut", "inner"), []byte("secret"), 0o644))
	must(os.Mkdir(filepath.Join(top, "shut", "sub"), 0o755))
	if v, err := readVersion(top, "shut/inner", daemon, 10); err != nil || v.Kind != KindFile || string(v.Data) != "secret" {
		t.Errorf("shut/inner for the daemon: %+v, %v; want the file", v, err)
	}
	if v, err := readVersion(top, "dir/missing", stranger, 10); err != nil || v.Kind != KindAbsent {
		t.Errorf("dir/missing for uid 4242: %+v, %v; want absent", v, err)
	}
	for _, p := range []string{"shut/inner", "shut/sub", "shut/missing", "shut/sub/deeper"} {
		if v, err := readVersion(top, p, stranger, 10); err != nil || v.Kind != KindUnreadable || v.Size != 0 || v.Data != nil {
			t.Errorf("%s for uid 4242: %+v, %v; want unreadable, no size", p, v, err)
		}
	}
}

// A path names a file below the project's top.
func TestUnitCleanRel(t *testing.T) {
	for in, want := range map[string]string{"calc.py": "calc.py", "./a/b": "a/b", "a//b/": "a/b"} {
		if got, err := cleanRel(in); err != nil || got != want {
			t.Errorf("cleanRel(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", ".", "..", "../x", "a/../../x", "a\x00b", "/", "/calc.py", "/etc/shadow"} {
		if _, err := cleanRel(in); err == nil {
			t.Errorf("cleanRel(%q): no error", in)
		}
	}
}

// Only text files merge, the base's possibly absent; each refusal says
// why, as the caller's mistake (ErrInvalid).
func TestUnitMergeable(t *testing.T) {
	file := func(which string) Version { return Version{Which: which, Kind: KindFile, Data: []byte("x\n")} }
	with := func(v Version, f func(*Version)) Version { f(&v); return v }
	absent := func(v *Version) { v.Kind = KindAbsent }
	for _, c := range []struct {
		vs   []Version
		want string
	}{
		{[]Version{file(WhichBase), file(WhichProject), file(WhichSandbox)}, ""},
		{[]Version{with(file(WhichBase), absent), file(WhichProject), file(WhichSandbox)}, ""},
		{[]Version{with(file(WhichBase), absent), with(file(WhichProject), absent), file(WhichSandbox)}, "only the sandbox has it"},
		{[]Version{file(WhichBase), with(file(WhichProject), absent), file(WhichSandbox)}, "the project deleted it"},
		{[]Version{file(WhichBase), file(WhichProject), with(file(WhichSandbox), func(v *Version) { v.Kind = KindSymlink; v.Note = "a symlink" })}, "the sandbox's version is symlink"},
		{[]Version{file(WhichBase), with(file(WhichProject), func(v *Version) { v.Binary = true }), file(WhichSandbox)}, "the project's version is binary"},
		{[]Version{file(WhichBase), file(WhichProject), with(file(WhichSandbox), func(v *Version) { v.Truncated = true })}, "too large"},
	} {
		err := mergeable(c.vs)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%+v: %v; want them merged", c.vs, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want) || !errors.Is(err, supervisor.ErrInvalid) || strings.Contains(err.Error(), "sandbox options")):
			t.Errorf("%+v: %v; want ErrInvalid saying %q", c.vs, err, c.want)
		}
	}
}

// A rebase takes a conflicting path whose sandbox version holds the
// project's change already (a merge's result), and only such a path.
func TestUnitMergedConflicts(t *testing.T) {
	trees := [3]string{t.TempDir(), t.TempDir(), t.TempDir()} // base, project, sandbox
	write := func(tree int, name string, data []byte) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(trees[tree], name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// merged.py: the sandbox holds both edits. mine.py: the sandbox's
	// edit alone. both.py: one line edited two ways. gone.py: the
	// project deleted it.
	write(0, "merged.py", lines(12, nil))
	write(1, "merged.py", lines(12, map[int]string{2: "two project"}))
	write(2, "merged.py", lines(12, map[int]string{2: "two project", 10: "ten sandbox"}))
	write(0, "mine.py", lines(12, nil))
	write(1, "mine.py", lines(12, map[int]string{2: "two project"}))
	write(2, "mine.py", lines(12, map[int]string{10: "ten sandbox"}))
	write(0, "both.py", lines(12, nil))
	write(1, "both.py", lines(12, map[int]string{10: "ten project"}))
	write(2, "both.py", lines(12, map[int]string{10: "ten sandbox"}))
	write(0, "gone.py", lines(12, nil))
	write(2, "gone.py", lines(12, map[int]string{10: "ten sandbox"}))
	left, err := merged(context.Background(), []string{"both.py", "gone.py", "merged.py", "mine.py"}, trees[0], trees[1], trees[2])
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"both.py", "gone.py", "mine.py"}; strings.Join(left, " ") != strings.Join(want, " ") {
		t.Errorf("conflicts left: %v; want %v (merged.py taken)", left, want)
	}
}

// A rebase's look for merged paths is bounded: a diff3 that does not end
// is killed with the diff it started (none computes on as root), the
// path stays a conflict, and the rebase is not failed by it; the other
// paths are not looked at once the budget is spent.
func TestUnitMergedConflictsBounded(t *testing.T) {
	trees := [3]string{t.TempDir(), t.TempDir(), t.TempDir()} // base, project, sandbox
	for i, data := range [][]byte{lines(12, nil), lines(12, map[int]string{2: "two project"}), lines(12, map[int]string{2: "two project", 10: "ten sandbox"})} {
		for _, name := range []string{"a.py", "b.py"} {
			if err := os.WriteFile(filepath.Join(trees[i], name), data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	left, err := merged(context.Background(), []string{"a.py", "b.py"}, trees[0], trees[1], trees[2])
	if err != nil || len(left) != 0 {
		t.Fatalf("merged paths with diff3: %v left, %v; want both taken", left, err)
	}

	// A diff3 whose diff never ends (it names its pid first).
	dir := t.TempDir()
	pids := filepath.Join(dir, "pids")
	fake := filepath.Join(dir, "diff3")
	script := "#!/bin/sh\nsleep 1000 &\necho $! >>" + pids + "\nwait\n"
	if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	defer func(p string, b time.Duration) { diff3Program, mergedBudget = p, b }(diff3Program, mergedBudget)
	diff3Program, mergedBudget = fake, time.Second
	left, err = merged(context.Background(), []string{"a.py", "b.py"}, trees[0], trees[1], trees[2])
	if err != nil || strings.Join(left, " ") != "a.py b.py" {
		t.Fatalf("with a diff3 that does not end: %v left, %v; want both conflicts, no error", left, err)
	}
	data, err := os.ReadFile(pids)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(data), "\n"); n != 1 {
		t.Errorf("diff3 ran %d times; want once: the budget spent, b.py is not looked at", n)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		t.Fatal(err)
	}
	// The diff is killed with diff3; it goes once reaped (a deadline as a
	// safety net only).
	for deadline := time.Now().Add(10 * time.Second); ; {
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil || strings.Contains(string(st), ") Z ") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("diff3's child %d still runs after diff3 was killed: %s", pid, st)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A file on which a process of the sandbox holds a lease is not waited
// for (the lease's break time, 45 s, the sandbox's lock held): Busy at
// once, and read as any other once the lease is gone.
func TestUnitReadVersionLeased(t *testing.T) {
	top := t.TempDir()
	file := filepath.Join(top, "calc.py")
	if err := os.WriteFile(file, []byte("print(1)\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	daemon := supervisor.Daemon("test")
	if v, err := readVersion(top, "calc.py", daemon, 100); err != nil || v.Kind != KindFile {
		t.Fatalf("calc.py: %+v, %v; want a file", v, err)
	}
	holder := exec.Command("python3", "-c", `import fcntl, os, signal, sys
signal.signal(signal.SIGIO, signal.SIG_IGN)
fd = os.open(sys.argv[1], os.O_RDONLY)
fcntl.fcntl(fd, 1024, fcntl.F_WRLCK)  # F_SETLEASE
print("held", flush=True)
sys.stdin.read()`, file)
	in, err := holder.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	holder.Stderr = os.Stderr
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	defer holder.Wait()
	defer in.Close()
	if line, err := bufio.NewReader(out).ReadString('\n'); line != "held\n" {
		t.Fatalf("the lease's holder said %q, %v", line, err)
	}
	type result struct {
		v   Version
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := readVersion(top, "calc.py", daemon, 100)
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		if !errors.Is(r.err, supervisor.ErrBusy) || !strings.Contains(r.err.Error(), "lease") {
			t.Errorf("a leased file: %+v, %v; want Busy naming the lease", r.v, r.err)
		}
	case <-time.After(20 * time.Second): // a safety net: the break time is 45 s
		t.Fatal("reading a leased file waits for the lease's break")
	}
}
