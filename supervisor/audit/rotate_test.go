package audit

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// readAll reads every file of the log at path, oldest first (audit.log.N
// down to audit.log), and returns the Sandbox field of each line; a line
// that is not a whole entry fails the test.
func readAll(t *testing.T, path string, keep int) []string {
	t.Helper()
	var out []string
	for i := keep; i >= 0; i-- {
		name := path
		if i > 0 {
			name += "." + strconv.Itoa(i)
		}
		f, err := os.Open(name)
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var e Entry
			if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
				t.Fatalf("%s: a line that is not a whole entry: %q: %v", name, sc.Text(), err)
			}
			out = append(out, e.Sandbox)
		}
		f.Close()
	}
	return out
}

func logFiles(t *testing.T, path string) (names []string, total int64) {
	t.Helper()
	ents, err := os.ReadDir(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		fi, err := os.Lstat(filepath.Join(filepath.Dir(path), e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v; want a regular file, 0600", e.Name(), fi.Mode())
		}
		names = append(names, e.Name())
		total += fi.Size()
	}
	return names, total
}

func record(t *testing.T, l *Log, i int) {
	t.Helper()
	if err := l.Record(Entry{Action: "expire", Sandbox: fmt.Sprintf("sb%05d", i), Result: "ok", Command: strings.Repeat("c", 100)}); err != nil {
		t.Fatal(err)
	}
}

// Every line is in one of the files, in order, across rotations and a
// reopen; and the files together hold at most Keep × MaxSize bytes.
func TestRotationKeepsEveryLineAndBoundsTheBytes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log", "audit.log")
	open := func(keep int) *Log {
		l, err := OpenWith(path, Options{MaxSize: 4096, Keep: keep})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	// Keep enough files for all: no line lost.
	l := open(100)
	for i := range 200 {
		record(t, l, i)
	}
	l.Close()
	l = open(100)
	for i := 200; i < 300; i++ {
		record(t, l, i)
	}
	l.Close()
	got := readAll(t, path, 100)
	if len(got) != 300 {
		t.Fatalf("%d lines across the files; want 300", len(got))
	}
	for i, s := range got {
		if s != fmt.Sprintf("sb%05d", i) {
			t.Fatalf("line %d is %s: lines lost or out of order", i, s)
		}
	}
	names, total := logFiles(t, path)
	if len(names) < 10 {
		t.Fatalf("%d files (%v) for %d bytes: no rotation at 4096 bytes", len(names), names, total)
	}

}

// With only Keep names ever used, the files hold at most Keep × MaxSize.
func TestRotationBoundsTheLogToKeepTimesMaxSize(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	l, err := OpenWith(path, Options{MaxSize: 8192, Keep: 4})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 600 {
		record(t, l, i)
	}
	l.Close()
	names, total := logFiles(t, path)
	if len(names) != 4 || total > 4*8192 {
		t.Fatalf("after 600 lines: %v, %d bytes; want 4 files, at most %d bytes", names, total, 4*8192)
	}
	got := readAll(t, path, 3)
	// The files hold the newest lines, without a gap.
	first, _ := strconv.Atoi(strings.TrimPrefix(got[0], "sb"))
	for i, s := range got {
		if s != fmt.Sprintf("sb%05d", first+i) {
			t.Fatalf("line %d of the kept files is %s; want sb%05d", i, s, first+i)
		}
	}
	if got[len(got)-1] != "sb00599" {
		t.Fatalf("the last line is %s", got[len(got)-1])
	}
	t.Logf("600 lines: the newest %d kept in %d bytes, %d files", len(got), total, len(names))
}

// A symlink planted at a rotated name is renamed as a name, never
// followed: its target keeps what it held, and the rotated file is the
// log's own. One planted at the live name is refused, not followed.
func TestRotationDoesNotFollowAPlantedSymlink(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.log")
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(victim, []byte("precious\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The control: a symlink is followed by a plain open for appending.
	probe := filepath.Join(dir, "probe")
	if err := os.Symlink(victim, probe); err != nil {
		t.Fatal(err)
	}
	if f, err := os.OpenFile(probe, os.O_WRONLY|os.O_APPEND, 0); err != nil {
		t.Fatal(err)
	} else {
		f.Close()
	}
	os.Remove(probe)

	for _, name := range []string{"audit.log.1", "audit.log.2", "audit.log.3"} {
		if err := os.Symlink(victim, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	l, err := OpenWith(path, Options{MaxSize: 1024, Keep: 4})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		record(t, l, i)
	}
	l.Close()
	if b, _ := os.ReadFile(victim); string(b) != "precious\n" {
		t.Fatalf("the symlinks' target now holds %q", b)
	}
	if fi, _ := os.Stat(victim); fi.Mode().Perm() != 0o644 {
		t.Fatalf("the symlinks' target's mode is now %v", fi.Mode())
	}
	names, _ := logFiles(t, path) // each a regular file, 0600
	if len(names) != 4 {
		t.Fatalf("files %v; want audit.log and 3 rotated", names)
	}

	// A link at the live name: refused by name, its target untouched.
	os.Remove(path)
	if err := os.Symlink(victim, path); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenWith(path, Options{}); err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Fatalf("opening a log that is a symlink: %v; want it refused", err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "precious\n" {
		t.Fatalf("the symlink's target now holds %q", b)
	}
}

// A directory others may write is refused: they could plant names in it.
func TestAnOpenDirectoryIsRefused(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(filepath.Join(dir, "audit.log")); err == nil || !strings.Contains(err.Error(), "writable by no one else") {
		t.Fatalf("a log in a directory of mode 0777: %v; want it refused", err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	l, err := Open(filepath.Join(dir, "audit.log"))
	if err != nil {
		t.Fatalf("a log in a directory of mode 0755: %v", err)
	}
	l.Close()
}

// crashEnv makes this test binary a writer that kills itself (SIGKILL) at
// a step of a rotation: "DIR STEP".
const crashEnv = "AUDIT_TEST_CRASH"

func TestMain(m *testing.M) {
	if v := os.Getenv(crashEnv); v != "" {
		dir, step, _ := strings.Cut(v, " ")
		crashHook = func(s string) {
			if s == step {
				_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			}
		}
		l, err := OpenWith(filepath.Join(dir, "audit.log"), Options{MaxSize: 2048, Keep: 100})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		// Bounded: a rotation that never comes must not fill the disk.
		for i := range 5000 {
			if err := l.Record(Entry{Action: "expire", Sandbox: fmt.Sprintf("k%05d", i), Result: "ok"}); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(2)
			}
			fmt.Println(i) // written and synced
		}
		fmt.Fprintln(os.Stderr, "5000 lines and no rotation reached", step)
		os.Exit(3)
	}
	os.Exit(m.Run())
}

// A kill -9 at each step of a rotation loses no line that was recorded,
// and the next start goes on with a usable log.
func TestAKillMidRotationLosesNoLine(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range []string{"shifted", "renamed", "opened"} {
		t.Run(step, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "audit.log")
			// Two rotations before: the shift has files to move.
			l, err := OpenWith(path, Options{MaxSize: 2048, Keep: 100})
			if err != nil {
				t.Fatal(err)
			}
			for i := range 40 {
				record(t, l, i)
			}
			l.Close()
			cmd := exec.Command(exe, "-test.run", "^$")
			cmd.Env = append(os.Environ(), crashEnv+"="+dir+" "+step)
			out, err := cmd.Output()
			if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
				t.Fatalf("the writer did not die at %s: %v", step, err)
			}
			recorded := len(strings.Fields(string(out)))
			// The next start appends and rotates on.
			l, err = OpenWith(path, Options{MaxSize: 2048, Keep: 100})
			if err != nil {
				t.Fatalf("reopening after a kill at %s: %v", step, err)
			}
			for i := range 40 {
				if err := l.Record(Entry{Action: "expire", Sandbox: fmt.Sprintf("after%05d", i), Result: "ok"}); err != nil {
					t.Fatal(err)
				}
			}
			l.Close()
			got := readAll(t, path, 100)
			var before, crashed, after int
			for _, s := range got {
				switch {
				case strings.HasPrefix(s, "after"):
					after++
				case strings.HasPrefix(s, "k"):
					crashed++
				case strings.HasPrefix(s, "sb"):
					before++
				}
			}
			// The killed writer recorded `recorded` lines; the one whose
			// write began the rotation was not yet written.
			if before != 40 || crashed != recorded || after != 40 {
				t.Fatalf("kill at %s: lines found: %d of the first run (want 40), %d of the killed one (want %d), %d after (want 40)",
					step, before, crashed, recorded, after)
			}
			t.Logf("kill at %s: %d lines recorded by the killed writer, all there", step, recorded)
		})
	}
}
