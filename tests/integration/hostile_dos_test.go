package integration

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/sandboxd/sandboxd/supervisor/api/calls"
	"github.com/sandboxd/sandboxd/supervisor/api/guard"
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

// auditLogSize is the audit log's size in bytes (0 before it exists).
func auditLogSize() int64 {
	fi, err := os.Stat("/var/log/sandboxd/audit.log")
	if err != nil {
		return 0
	}
	return fi.Size()
}

// systemBus is a connection to the system bus, closed at the test's end.
func systemBus(t *testing.T) *dbus.Conn {
	t.Helper()
	conn, err := dbus.ConnectSystemBus()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// TestHostileHugeArgvIsRefusedBeforeTheAuditLog: an Exec's argv is
// checked for size before anything is written, so a caller cannot make
// the root daemon write (and fsync) megabytes per call.
func TestHostileHugeArgvIsRefusedBeforeTheAuditLog(t *testing.T) {
	install(t)
	_, object := create(t)
	size := auditLogSize
	conn := systemBus(t)
	exec := func(argv []string) string {
		return call(t, conn, object, "org.sandboxd1.Sandbox.Exec", append([]any{argv, map[string]dbus.Variant{}}, fds(t, 3)...)...)
	}
	big := strings.Repeat("A", 100_000)
	before := size()
	if msg := exec([]string{"echo", big, big}); !strings.Contains(msg, "more than the "+strconv.Itoa(guard.MaxArgvBytes)+" allowed") {
		t.Fatalf("Exec with a 200 kB argv: %q; want a refusal naming the limit", msg)
	}
	if msg := exec(strings.Fields(strings.Repeat("x ", guard.MaxArgs+1))); !strings.Contains(msg, "more than the "+strconv.Itoa(guard.MaxArgs)+" allowed") {
		t.Fatalf("Exec with %d arguments: %q; want a refusal naming the limit", guard.MaxArgs+1, msg)
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

// TestHostileConcurrentHeavyCallsAreCapped fills one uid's slots for heavy
// calls (diffs, try, promotion: each may hold tens of megabytes of the
// root daemon) with Try calls whose check sleeps: a further heavy call of
// that uid waits its turn, and once none frees within HeavyCallWait it is
// refused with a clear error; a burst that the slots can serve in turn is
// served whole.
func TestHostileConcurrentHeavyCallsAreCapped(t *testing.T) {
	install(t)
	_, object := create(t)
	hold := calls.HeavyCallWait + 10*time.Second
	var wg sync.WaitGroup
	tries := make([]string, calls.MaxHeavyCallsPerCaller)
	for i := range tries {
		wg.Go(func() {
			out, ok := busctl("--timeout=120", "/org/sandboxd1", "org.sandboxd1.Manager", "Try",
				"sasssa{sv}", "web", "1", "true", fmt.Sprintf("sleep %d", int(hold.Seconds())), "none", "1", "Name", "s", fmt.Sprintf("heavy%d", i))
			if !ok {
				tries[i] = out
			}
		})
	}
	// The tries hold every slot from their start: wait until each has
	// made its sandbox (its check then sleeps for longer than the wait
	// below), whatever the machine's speed.
	deadline := time.Now().Add(3 * time.Minute)
	for {
		out, _ := busctl("/org/sandboxd1", "org.sandboxd1.Manager", "ListSandboxes")
		if strings.Count(out, `"heavy`) >= len(tries) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d Trys made no %d sandboxes within 3 minutes: %s", len(tries), len(tries), out)
		}
		time.Sleep(50 * time.Millisecond)
	}
	start := time.Now()
	out, ok := busctl("--timeout=120", object, "org.sandboxd1.Sandbox", "UnifiedDiff", "a{sv}", "0")
	waited := time.Since(start)
	if ok || !strings.Contains(out, "too many concurrent calls") {
		t.Errorf("a heavy call while the uid's %d slots are held: ok %v, %s; want refused as too many concurrent calls",
			calls.MaxHeavyCallsPerCaller, ok, out[:min(len(out), 300)])
	}
	if waited < calls.HeavyCallWait-time.Second {
		t.Errorf("the heavy call was refused after %v; want a wait of about %v for a slot first", waited, calls.HeavyCallWait)
	}
	t.Logf("with %d slots held: refused after %v: %s", calls.MaxHeavyCallsPerCaller, waited.Round(time.Millisecond), strings.TrimSpace(out))
	wg.Wait()
	for i, e := range tries {
		if e != "" {
			t.Errorf("Try %d holding a slot: %s", i, e)
		}
	}
	// A burst larger than the slots is served in turn, none refused.
	n := 3 * calls.MaxHeavyCallsPerCaller
	errs := make([]string, n)
	for i := range n {
		wg.Go(func() {
			if out, ok := busctl("--timeout=120", object, "org.sandboxd1.Sandbox", "UnifiedDiff", "a{sv}", "0"); !ok {
				errs[i] = out
			}
		})
	}
	wg.Wait()
	for i, e := range errs {
		if e != "" {
			t.Errorf("UnifiedDiff %d of a burst of %d: %s", i, n, e)
		}
	}
}

// TestHostileHugeCheckAndEnvironmentAreRefusedBeforeTheAuditLog: Try's
// check and an Exec's Environment and WorkingDirectory are checked for
// size as the message is read, each refusal naming the argument and its
// limit, and nothing is written to the audit log for them. The controls:
// a check under the limit reaches Try (which refuses a bad keep for its
// own reason), and an Exec with a few variables runs and is
// audited.
func TestHostileHugeCheckAndEnvironmentAreRefusedBeforeTheAuditLog(t *testing.T) {
	install(t)
	_, object := create(t)
	size := auditLogSize
	conn := systemBus(t)
	try := func(check, keep string) string {
		return call(t, conn, "/org/sandboxd1", "org.sandboxd1.Manager.Try", "web", []string{"true"}, check, keep, map[string]dbus.Variant{})
	}
	exec := func(opts map[string]dbus.Variant) string {
		return call(t, conn, object, "org.sandboxd1.Sandbox.Exec", append([]any{[]string{"true"}, opts}, fds(t, 3)...)...)
	}
	env := make([]string, guard.MaxEnvEntries+1)
	for i := range env {
		env[i] = "V" + strconv.Itoa(i) + "=x"
	}
	before := size()
	refusals := []struct{ what, msg, want string }{
		{"Try with a 100 kB check", try("true "+strings.Repeat("C", 100_000), "none"),
			"check holds 100005 bytes, more than the " + strconv.Itoa(guard.MaxCheckBytes) + " allowed"},
		{"Exec with 1025 variables", exec(map[string]dbus.Variant{"Environment": dbus.MakeVariant(env)}),
			"option Environment has 1025 entries, more than the " + strconv.Itoa(guard.MaxEnvEntries) + " allowed"},
		{"Exec with a 200 kB variable", exec(map[string]dbus.Variant{"Environment": dbus.MakeVariant([]string{"V=" + strings.Repeat("E", 200_000)})}),
			"option Environment holds 200003 bytes, more than the " + strconv.Itoa(guard.MaxEnvBytes) + " allowed"},
		{"Exec in a 5000-byte directory", exec(map[string]dbus.Variant{"WorkingDirectory": dbus.MakeVariant("/" + strings.Repeat("d", 4999))}),
			"option WorkingDirectory holds 5000 bytes, more than the " + strconv.Itoa(guard.MaxWorkingDirBytes) + " allowed"},
	}
	for _, r := range refusals {
		if !strings.Contains(r.msg, r.want) {
			t.Errorf("%s: %q; want a refusal saying %q", r.what, r.msg, r.want)
		}
	}
	if after := size(); after != before {
		t.Fatalf("refused calls wrote %d bytes to the audit log", after-before)
	}
	// The controls: under the limits, the calls reach their handlers.
	if msg := try("true "+strings.Repeat("C", 60_000), "bogus"); !strings.Contains(msg, "want winner, all or none") {
		t.Errorf("Try with a 60 kB check and keep \"bogus\": %q; want Try's own refusal of keep", msg)
	}
	if msg := exec(map[string]dbus.Variant{"Environment": dbus.MakeVariant(env[:10]), "WorkingDirectory": dbus.MakeVariant("/")}); msg != "" {
		t.Fatalf("Exec true with 10 variables: %s", msg)
	}
	if size() == before {
		t.Fatal("an Exec was not audited: the check above proves nothing")
	}
}
