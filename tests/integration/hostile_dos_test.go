package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/godbus/dbus/v5"

	"github.com/sandboxd/sandboxd/supervisor/api"
)

// daemonFDs counts the daemon's open descriptors.
func daemonFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/" + strconv.Itoa(mainPID(t)) + "/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// busctl runs busctl call and returns its combined output and whether it
// succeeded.
func busctl(args ...string) (string, bool) {
	out, err := exec.Command("busctl", append([]string{"call", "org.sandboxd1"}, args...)...).CombinedOutput()
	return string(out), err == nil
}

// call calls method on object with args (dbus.UnixFD ones are sent as
// descriptors, as godbus does) and returns the error's text, "" if none.
func call(t *testing.T, conn *dbus.Conn, object, method string, args ...any) string {
	t.Helper()
	err := conn.Object("org.sandboxd1", dbus.ObjectPath(object)).Call(method, 0, args...).Err
	if err == nil {
		return ""
	}
	return err.Error()
}

// fds is n descriptors of /dev/null, as arguments.
func fds(t *testing.T, n int) []any {
	t.Helper()
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	out := make([]any, n)
	for i := range out {
		out[i] = dbus.UnixFD(f.Fd())
	}
	return out
}

// TestHostileDescriptorsACallDoesNotTakeAreClosed sends calls carrying
// descriptors the method does not take (godbus sends one per "h", as
// busctl does): the daemon used to keep every one of them open, 16 a
// call. Now each is closed and the call refused.
func TestHostileDescriptorsACallDoesNotTakeAreClosed(t *testing.T) {
	install(t)
	conn, err := dbus.ConnectSystemBus()
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	execArgs := func(n int) []any { return append([]any{[]string{"true"}, map[string]dbus.Variant{}}, fds(t, n)...) }
	calls := []struct {
		object, method string
		args           []any
	}{
		// A method that takes no arguments.
		{"/org/sandboxd1", "org.sandboxd1.Manager.ListProjects", fds(t, 16)},
		// A method that does not exist.
		{"/org/sandboxd1", "org.sandboxd1.Manager.NoSuchMethod", fds(t, 16)},
		// Exec with one descriptor more than it takes.
		{"/org/sandboxd1/sandbox/nosuch", "org.sandboxd1.Sandbox.Exec", execArgs(4)},
		// Exec on the manager's object.
		{"/org/sandboxd1", "org.sandboxd1.Sandbox.Exec", execArgs(3)},
	}
	before := daemonFDs(t)
	sent := 0
	for _, c := range calls {
		for range 20 {
			if msg := call(t, conn, c.object, c.method, c.args...); msg == "" {
				t.Fatalf("%s on %s: succeeded", c.method, c.object)
			}
			sent += len(c.args)
		}
	}
	after := daemonFDs(t)
	t.Logf("daemon descriptors: %d before, %d after calls carrying %d descriptors", before, after, sent)
	if after > before+4 {
		t.Fatalf("the daemon's descriptors grew from %d to %d", before, after)
	}
	// The control: the descriptors reached the daemon (it counts them),
	// so a daemon that kept them would have hundreds more open.
	if msg := call(t, conn, "/org/sandboxd1", "org.sandboxd1.Manager.ListProjects", fds(t, 16)...); !strings.Contains(msg, "carries 16 file descriptors") {
		t.Fatalf("ListProjects with 16 descriptors answered %q; want a refusal counting them", msg)
	}
	// Exec as it should be called still takes its three (and closes
	// them when, as here, the sandbox does not exist).
	for range 20 {
		if msg := call(t, conn, "/org/sandboxd1/sandbox/nosuch", "org.sandboxd1.Sandbox.Exec", execArgs(3)...); !strings.Contains(msg, "no sandbox") {
			t.Fatalf("Exec on a sandbox that does not exist answered %q", msg)
		}
	}
	if now := daemonFDs(t); now > after+4 {
		t.Fatalf("Exec's own descriptors were kept: %d open, %d before", now, after)
	}
}

// TestHostileHugeArgvIsRefusedBeforeTheAuditLog: an Exec's argv is
// checked for size before anything is written, so a caller cannot make
// the root daemon write (and fsync) megabytes per call.
func TestHostileHugeArgvIsRefusedBeforeTheAuditLog(t *testing.T) {
	install(t)
	_, object := create(t)
	auditLog := "/var/log/sandboxd/audit.log"
	size := func() int64 {
		fi, err := os.Stat(auditLog)
		if err != nil {
			return 0
		}
		return fi.Size()
	}
	conn, err := dbus.ConnectSystemBus()
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	exec := func(argv []string) string {
		return call(t, conn, object, "org.sandboxd1.Sandbox.Exec", append([]any{argv, map[string]dbus.Variant{}}, fds(t, 3)...)...)
	}
	big := strings.Repeat("A", 100_000)
	before := size()
	if msg := exec([]string{"echo", big, big}); !strings.Contains(msg, "more than the "+strconv.Itoa(api.MaxArgvBytes)+" allowed") {
		t.Fatalf("Exec with a 200 kB argv: %q; want a refusal naming the limit", msg)
	}
	if msg := exec(strings.Fields(strings.Repeat("x ", api.MaxArgs+1))); !strings.Contains(msg, "more than the "+strconv.Itoa(api.MaxArgs)+" allowed") {
		t.Fatalf("Exec with %d arguments: %q; want a refusal naming the limit", api.MaxArgs+1, msg)
	}
	if after := size(); after != before {
		t.Fatalf("refused calls wrote %d bytes to the audit log", after-before)
	}
	// The control: an Exec of a normal argv is audited.
	if msg := exec([]string{"true"}); msg != "" {
		t.Fatalf("Exec true: %s", msg)
	}
	if size() == before {
		t.Fatal("an Exec was not audited: the check above proves nothing")
	}
}

// TestHostileConcurrentHeavyCallsAreCapped runs many UnifiedDiff calls of
// a large change at once from one uid: at most a few run, the others are
// refused at once with a clear error instead of each holding tens of
// megabytes of the root daemon.
func TestHostileConcurrentHeavyCallsAreCapped(t *testing.T) {
	install(t)
	_, object := create(t)
	path := property(t, object, "Path")
	// About 24 MB of changed text: each diff takes a while to build.
	line := strings.Repeat("0123456789abcdef", 6) + "\n"
	text := strings.Repeat(line, 100_000/len(line)+1)
	for i := range 240 {
		if err := os.WriteFile(filepath.Join(path, "big"+strconv.Itoa(i)+".txt"), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	const n = 3 * api.MaxHeavyCallsPerCaller
	var wg sync.WaitGroup
	outs := make([]string, n)
	oks := make([]bool, n)
	for i := range n {
		wg.Go(func() {
			outs[i], oks[i] = busctl("--timeout=120", object, "org.sandboxd1.Sandbox", "UnifiedDiff", "a{sv}", "0")
			if oks[i] {
				outs[i] = outs[i][:min(len(outs[i]), 80)]
			}
		})
	}
	wg.Wait()
	served, refused := 0, 0
	for i := range n {
		switch {
		case oks[i]:
			served++
		case strings.Contains(outs[i], "too many concurrent calls"):
			refused++
		default:
			t.Errorf("UnifiedDiff %d: %s", i, outs[i])
		}
	}
	t.Logf("%d parallel UnifiedDiff calls of one uid: %d served, %d refused", n, served, refused)
	if served == 0 || refused == 0 {
		t.Fatalf("%d parallel UnifiedDiff calls: %d served, %d refused; want both", n, served, refused)
	}
	// Once they end, the slots are free again.
	if out, ok := busctl(object, "org.sandboxd1.Sandbox", "UnifiedDiff", "a{sv}", "0"); !ok {
		t.Fatalf("UnifiedDiff after the others ended: %s", out[:min(len(out), 200)])
	}
}
