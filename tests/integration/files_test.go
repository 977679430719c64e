package integration

import (
	"bytes"
	"crypto/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/sandboxd/sandboxd/sandboxd1"
)

// busOn calls a method of sandbox id's object with busctl as root and
// returns its output and error.
func busOn(id string, args ...string) (string, error) {
	out, err := exec.Command("busctl", append([]string{"call", sandboxd1.BusName, string(sandboxd1.SandboxPath(id)),
		sandboxd1.SandboxInterface}, args...)...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// Files go in and out of a sandbox through the file API as the sandbox
// sees them: cp both ways (a file larger than one chunk whole), cat, a
// list, an edit in place; the project on the host is untouched.
func TestFilesInAndOut(t *testing.T) {
	tb := install(t)
	id := sandbox(t)
	dir := t.TempDir()
	big := make([]byte, 40<<20+12345) // three chunks, the last short
	if _, err := rand.Read(big); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(dir, "big.bin")
	if err := os.WriteFile(src, big, 0o640); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	ok(t, "cp", src, id+":/tmp/big.bin")
	t.Logf("cp in: %v", time.Since(start))
	if got := ok(t, "exec", id, "--", "sh", "-c", "stat -c %a /tmp/big.bin; sha256sum </tmp/big.bin"); !strings.HasPrefix(got, "640\n") {
		t.Errorf("the copied file's mode in the sandbox: %q, want 640", got)
	}
	out := filepath.Join(dir, "back.bin")
	start = time.Now()
	ok(t, "cp", id+":/tmp/big.bin", out)
	t.Logf("cp out: %v", time.Since(start))
	if back, err := os.ReadFile(out); err != nil || !bytes.Equal(back, big) {
		t.Fatalf("the file copied out differs from the one copied in (%d of %d bytes): %v", len(back), len(big), err)
	}

	// A relative path is the project's; cat prints it; an edit replaces
	// every occurrence in place.
	if got := ok(t, "cat", id, "index.html"); got != "<h1>web</h1>\n" {
		t.Errorf("cat index.html: %q", got)
	}
	fails(t, 3, "no such file", "cat", id, "/no/such/file")
	fails(t, 2, `not a regular file \(a dir\)`, "cp", id+":/tmp", dir)
	ok(t, "exec", id, "--", "sh", "-c", "printf 'x = 1\\ny = x + 1\\n' > app.py && ln app.py app-link.py")
	if got, err := busOn(id, "EditFile", "sss", "app.py", "x", "z"); err != nil || got != "u 2" {
		t.Errorf("EditFile x -> z: %v, %q; want 2 replacements", err, got)
	}
	if got := ok(t, "cat", id, "app-link.py"); got != "z = 1\ny = z + 1\n" {
		t.Errorf("after the edit, the file's other link reads %q: the edit was not in place", got)
	}
	if got, err := busOn(id, "EditFile", "sss", "app.py", "nowhere", "x"); err == nil || !strings.Contains(got, "does not contain") {
		t.Errorf("EditFile of a text that is not there: %v, %q", err, got)
	}
	// Texts of control characters (JSON would make them six times their
	// size): up to 1 MiB each, and refused by name past it.
	conn, err := dbus.ConnectSystemBus()
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	obj := conn.Object(sandboxd1.BusName, sandboxd1.SandboxPath(id))
	edit := sandboxd1.Member(sandboxd1.SandboxInterface, sandboxd1.MethodEditFile)
	ctrl := strings.Repeat("\x01", 1<<20)
	ok(t, "exec", id, "--", "sh", "-c", "printf 'a\\001b' > ctrl.txt")
	var n uint32
	if err := obj.Call(edit, 0, "ctrl.txt", "\x01", ctrl).Store(&n); err != nil || n != 1 {
		t.Errorf("EditFile with a new text of 1 MiB of \\x01: %v, %d", err, n)
	}
	if err := obj.Call(edit, 0, "ctrl.txt", ctrl+"\x01", "x").Err; err == nil || !strings.Contains(err.Error(), "more than the 1048576 allowed") {
		t.Errorf("EditFile of a text over 1 MiB: %.300v", err)
	}
	// WriteFile makes a file as the caller; ListFiles sees it.
	if got, err := busOn(id, "WriteFile", "saya{sv}", "/tmp/new/x.txt", "2", "104", "105", "0"); err == nil || !strings.Contains(got, "no such file") {
		t.Errorf("WriteFile under a missing directory: %v, %q", err, got)
	}
	ok(t, "exec", id, "--", "mkdir", "-p", "/tmp/new/sub")
	if got, err := busOn(id, "WriteFile", "saya{sv}", "/tmp/new/x.txt", "2", "104", "105", "1", "Mode", "u", "384"); err != nil {
		t.Fatalf("WriteFile: %v, %q", err, got)
	}
	if got := ok(t, "exec", id, "--", "stat", "-c", "%a %s", "/tmp/new/x.txt"); got != "600 2\n" {
		t.Errorf("the written file: %q, want mode 600 and 2 bytes", got)
	}
	got, err := busOn(id, "ListFiles", "sa{sv}", "/tmp/new", "1", "Recursive", "b", "true")
	if err != nil || !strings.Contains(got, `"sub" "dir"`) || !strings.Contains(got, `"x.txt" "file" 384 0 2`) {
		t.Errorf("ListFiles /tmp/new recursive: %v, %q", err, got)
	}
	// The host's project never saw any of it.
	if _, err := os.Stat(filepath.Join(tb.Btrfs.Project, "app.py")); !os.IsNotExist(err) {
		t.Errorf("app.py reached the project on the host: %v", err)
	}
}

// The file API refuses, by name, what it must not serve; each refusal is
// first shown to be a real thing (the control) outside or by a command.
func TestFilesRefuseWhatTheyMustNot(t *testing.T) {
	install(t)
	// A root-only file of the host: root reads it on the host; inside,
	// the member's exec is refused, and so is the file API, by any path.
	secret := "/etc/sandboxd-files-secret"
	if err := os.WriteFile(secret, []byte("host secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(secret) })
	const member = "files-member"
	id := memberSandbox(t, member)
	if b, err := os.ReadFile(secret); err != nil || string(b) != "host secret\n" {
		t.Fatalf("control: root reads %s on the host: %v", secret, err)
	}
	if _, _, code := ctlAs(t, member, "exec", id, "--", "cat", secret); code == 0 {
		t.Fatalf("control: the member's command read %s", secret)
	}
	okAs(t, member, "exec", id, "--", "ln", "-s", secret, "/tmp/to-secret")
	for _, p := range []string{secret, "../../../../../../.." + secret, "/tmp/to-secret", "/proc/1/root" + secret} {
		if out, errOut, code := ctlAs(t, member, "cat", id, p); code == 0 || strings.Contains(out, "host secret") {
			t.Errorf("the member read %s through the file API: %q %q", p, out, errOut)
		}
	}
	// A symlink to the init's own descriptors (a magic link) is not
	// followed, whoever asks.
	okAs(t, member, "exec", id, "--", "ln", "-s", "/proc/self/fd/0", "/tmp/to-fd")
	if _, _, code := ctl(t, "", "cat", id, "/tmp/to-fd"); code == 0 {
		t.Errorf("cat through a magic link to the init's descriptors worked")
	}
	// /proc and /sys are the kernel's: a command reads them (the
	// control), the file API does not, as it would read them as the init.
	if out := okAs(t, member, "exec", id, "--", "head", "-c", "4", "/proc/self/status"); out != "Name" {
		t.Fatalf("control: a command reads /proc/self/status: %q", out)
	}
	if _, errOut, code := ctlAs(t, member, "cat", id, "/proc/self/status"); code == 0 || !strings.Contains(errOut, "kernel") {
		t.Errorf("cat /proc/self/status through the file API: exit %d, %q", code, errOut)
	}
	// Nor are /proc's directories listed (their self, the init's, holds
	// its descriptors): a command lists them (the control).
	if out := okAs(t, member, "exec", id, "--", "ls", "/proc/self/fd"); out == "" {
		t.Fatalf("control: a command lists /proc/self/fd")
	}
	if got, err := busOn(id, "ListFiles", "sa{sv}", "/proc/self/fd", "0"); err == nil || !strings.Contains(got, "kernel") {
		t.Errorf("ListFiles /proc/self/fd: %v, %q", err, got)
	}
	// A sparse file of an exabyte does not fill the host's disk: cp
	// stops at the room there is and leaves nothing.
	okAs(t, member, "exec", id, "--", "truncate", "-s", "1E", "/tmp/huge")
	dst := t.TempDir()
	if _, errOut, code := ctl(t, "", "cp", id+":/tmp/huge", dst); code != 1 || !strings.Contains(errOut, "1152921504606846976 bytes, larger than the") {
		t.Errorf("cp of an exabyte's sparse file: exit %d, %q", code, errOut)
	}
	if left, _ := os.ReadDir(dst); len(left) != 0 {
		t.Errorf("cp left %d files behind", len(left))
	}
	// A fifo would block the daemon: refused at once, by what it is.
	okAs(t, member, "exec", id, "--", "mkfifo", "/tmp/fifo")
	if _, errOut, code := ctlAs(t, member, "cat", id, "/tmp/fifo"); code != 2 || !strings.Contains(errOut, "not a regular file (a fifo)") {
		t.Errorf("cat of a fifo: exit %d, %q", code, errOut)
	}
	// A file the member writes is the member's, inside; it cannot write
	// root's files, nor where root's daemon keeps its state.
	if owner := okAs(t, member, "exec", id, "--", "sh", "-c", "echo hi > /tmp/mine && stat -c %U /tmp/mine"); owner != member+"\n" {
		t.Errorf("control: the member's file is %q's", owner)
	}
	f, err := os.CreateTemp("", "empty")
	if err != nil || f.Chmod(0o644) != nil {
		t.Fatal(err)
	}
	f.Close()
	empty := f.Name()
	t.Cleanup(func() { os.Remove(empty) })
	if _, errOut, code := ctlAs(t, member, "cp", empty, id+":/etc/passwd"); code != 4 || !strings.Contains(errOut, "permission denied") {
		t.Errorf("the member overwrote /etc/passwd inside: exit %d, %q", code, errOut)
	}
	if _, err := os.Stat("/var/lib/sandboxd/state.db"); err != nil {
		t.Fatalf("control: the daemon's database on the host: %v", err)
	}
	if _, errOut, code := ctlAs(t, member, "cat", id, "/var/lib/sandboxd/state.db"); code == 0 {
		t.Errorf("the member read the daemon's database: %q", errOut)
	}
	// Another member cannot reach the sandbox's files at all.
	groupMember(t, "files-other")
	if _, errOut, code := ctlAs(t, "files-other", "cat", id, "/tmp/mine"); code != 3 {
		t.Errorf("another user read a sandbox's file: exit %d, %q", code, errOut)
	}
	// A frozen sandbox answers WrongState, not a hang.
	okAs(t, member, "freeze", id)
	if _, errOut, code := ctlAs(t, member, "cat", id, "/tmp/mine"); code != 5 || !strings.Contains(errOut, "frozen") {
		t.Errorf("cat in a frozen sandbox: exit %d, %q", code, errOut)
	}
	okAs(t, member, "thaw", id)
	// Bad input: an empty path, a NUL, too much at once.
	for want, c := range map[string][]string{
		"empty or holds a NUL": {"ReadFile", "stt", "", "0", "0"},
		"read it in parts":     {"ReadFile", "stt", "/tmp/mine", "0", "99999999999"},
		"unknown option":       {"WriteFile", "saya{sv}", "/tmp/mine", "0", "1", "Owner", "u", "0"},
	} {
		if got, err := busOn(id, c...); err == nil || !strings.Contains(got, want) {
			t.Errorf("%v: %v, %q; want %q", c, err, got, want)
		}
	}
}
