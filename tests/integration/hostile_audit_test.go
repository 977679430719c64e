package integration

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/sandboxd/sandboxd/sandboxd1"
	"github.com/sandboxd/sandboxd/supervisor/audit"
	"github.com/sandboxd/sandboxd/tests/testbed"
)

// floodEnv makes this test binary a member's client that calls ReadFile
// of PATH on OBJECT N times as fast as it can, then prints how many
// answers of each error name it got, as JSON: "OBJECT\nPATH\nN".
const floodEnv = "SANDBOXD_INTEGRATION_FLOOD"

func init() {
	if v := os.Getenv(floodEnv); v != "" {
		os.Exit(flood(v))
	}
}

func flood(spec string) int {
	parts := strings.SplitN(spec, "\n", 3)
	n, _ := strconv.Atoi(parts[2])
	conn, err := dbus.ConnectSystemBus()
	if err != nil {
		fmt.Fprintln(os.Stderr, "flood:", err)
		return 2
	}
	defer conn.Close()
	obj := conn.Object(sandboxd1.BusName, dbus.ObjectPath(parts[0]))
	answers := map[string]int{}
	words := map[string]string{} // the first answer's words of each name
	for range n {
		err := obj.Call("org.sandboxd1.Sandbox.ReadFile", 0, parts[1], uint64(0), uint64(0)).Err
		var derr dbus.Error
		name := "ok"
		switch {
		case err == nil:
		case asDBusError(err, &derr):
			name = derr.Name
		default:
			name = "not a D-Bus error"
		}
		answers[name]++
		if _, ok := words[name]; !ok && err != nil {
			words[name] = err.Error()
		}
	}
	_ = json.NewEncoder(os.Stdout).Encode(floodAnswers{answers, words})
	return 0
}

// floodAnswers is what a flood prints: its answers counted by error
// name, and the words of the first of each.
type floodAnswers struct {
	Count map[string]int
	Words map[string]string
}

func (a floodAnswers) String() string {
	var b strings.Builder
	for name, n := range a.Count {
		fmt.Fprintf(&b, "%d × %s", n, name)
		if w := a.Words[name]; w != "" {
			fmt.Fprintf(&b, " (the first: %.300q)", w)
		}
		b.WriteString("; ")
	}
	return b.String()
}

func asDBusError(err error, d *dbus.Error) bool {
	switch e := err.(type) {
	case dbus.Error:
		*d = e
		return true
	case *dbus.Error:
		*d = *e
		return true
	}
	return false
}

// floodAs runs n ReadFile calls of path on object as member and returns
// the answers by error name.
func floodAs(t *testing.T, member, object, path string, n int) floodAnswers {
	t.Helper()
	bin, _ := memberBinary(t)
	cmd := memberReexec(bin, member, floodEnv+"="+object+"\n"+path+"\n"+strconv.Itoa(n))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("the flood as %s: %v: %s", member, err, stderr.String())
	}
	var answers floodAnswers
	if err := json.Unmarshal(out, &answers); err != nil {
		t.Fatalf("the flood's answers %q: %v", out, err)
	}
	return answers
}

// longMissingPath is a path of about 4 KiB that names nothing.
func longMissingPath() string {
	return "/nope/" + strings.Repeat(strings.Repeat("a", 200)+"/", 20)
}

const auditLogPath = "/var/log/sandboxd/audit.log"

// auditSince reads the audit log's whole lines from offset.
func auditSince(t *testing.T, offset int64) []audit.Entry {
	t.Helper()
	f, err := os.Open(auditLogPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	var out []audit.Entry
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var e audit.Entry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("the audit log holds a line that is not a whole entry: %q: %v", sc.Text(), err)
		}
		out = append(out, e)
	}
	return out
}

// TestHostileRefusalFloodIsBoundedInTheAuditLog is issue 28's finding 3,
// as a member of group sandboxd: 600 ReadFile calls of a 4 KiB path
// that names nothing in its own sandbox, each refused. They used to add
// 4 MB to the root-only audit log in seconds (each line fsynced, the
// path twice in full). Now the refusals are cut to 256 bytes and the
// member's budget of refusal lines lets through 60 a minute; the rest
// are counted, and one audit-left-out line says how many: every call is
// either a line or in that count. The member's action before the flood
// is in the log.
func TestHostileRefusalFloodIsBoundedInTheAuditLog(t *testing.T) {
	const member, calls = "hostile-audit", 600
	uid, gid := groupMember(t, member)
	reconfigure(t, "")
	memberProject(t, "hostile-audit", uid, gid, map[string]string{"f": "f\n"})
	start := auditLogSize()
	sb := strings.TrimSpace(okAs(t, member, "create", "--quiet", "hostile-audit"))
	okAs(t, member, "exec", sb, "--", "true")

	path := longMissingPath()
	before := auditLogSize()
	began := time.Now()
	answers := floodAs(t, member, "/org/sandboxd1/sandbox/"+sb, path, calls)
	took := time.Since(began)
	grew := auditLogSize() - before
	// The control: each call reached the daemon and was refused there
	// (by the sandbox's init: no such file), not by the bus.
	if answers.Count[sandboxd1.ErrorNoSuchFile] != calls {
		t.Fatalf("the flood's answers: %v; want %d × %s", answers, calls, sandboxd1.ErrorNoSuchFile)
	}
	t.Logf("%d refused ReadFile calls of a %d-byte path in %v: the audit log grew by %d bytes", calls, len(path), took.Round(time.Millisecond), grew)
	// 60 lines of under 1 KiB, a few refilled while the flood ran.
	if grew > 128<<10 {
		t.Fatalf("the audit log grew by %d bytes for %d refusals; want at most 128 KiB", grew, calls)
	}

	// The count comes at the end of the member's interval (a minute).
	var written int
	var left *audit.LeftOut
	deadline := time.Now().Add(3 * time.Minute)
	for left == nil {
		if time.Now().After(deadline) {
			t.Fatalf("no audit-left-out line of uid %d three minutes after its flood", uid)
		}
		time.Sleep(500 * time.Millisecond)
		written = 0
		for _, e := range auditSince(t, before) {
			switch {
			case e.CallerUID == nil || *e.CallerUID != uid:
			case e.LeftOut != nil:
				left = e.LeftOut
			case e.Action == "read-file":
				written++
				if !e.Refused || e.Result != "error" || len(e.Command) > audit.RefusedField || len(e.Error) > audit.RefusedField {
					t.Fatalf("a refusal's line: %+v; want refused, its fields at most %d bytes", e, audit.RefusedField)
				}
			}
		}
	}
	var counted int
	for _, c := range left.By {
		if c.Action == "read-file" && c.Result == "refused" {
			counted = c.Lines
		}
	}
	t.Logf("written %d refusal lines, counted %d in %+v", written, counted, *left)
	if written == 0 || written+counted != calls {
		t.Errorf("%d refusals written and %d counted; want %d in all, some written", written, counted, calls)
	}
	// The member's action before the flood is there.
	var execs int
	for _, e := range auditSince(t, start) {
		if e.CallerUID != nil && *e.CallerUID == uid && e.Action == "exec" && e.Result == "ok" && e.Sandbox == sb {
			execs++
		}
	}
	if execs != 1 {
		t.Errorf("%d lines of the member's exec before its flood; want 1", execs)
	}
	if st, err := os.Stat(auditLogPath); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("the audit log: %v, mode %v; want 0600", err, st.Mode())
	}
}

// TestHostileRefusalFloodLeavesTheJournalToOthers is from issue 28's
// finding 10: journald lets each service log at most so many lines of a
// priority an interval (RateLimitBurst; here 100, times what the free
// space gives) and drops the rest, whoever's they are. A member's 1,500
// refused calls (warnings) used to spend it all, so another member's
// refusal a moment later, and any warning of the daemon's, was not in
// the journal. Now a caller's refusals reach the journal 10 a minute,
// then as a count, and the other's line is there (and root's create).
func TestHostileRefusalFloodLeavesTheJournalToOthers(t *testing.T) {
	const member, other, calls = "hostile-journal", "hostile-journal-b", 1500
	uid, _ := groupMember(t, member)
	otherUID, _ := groupMember(t, other)
	conf := "/etc/systemd/journald.conf.d/sandboxd-test-ratelimit.conf"
	if err := os.MkdirAll(filepath.Dir(conf), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(conf, []byte("[Journal]\nRateLimitIntervalSec=60s\nRateLimitBurst=100\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	testbed.MustRun(t, "systemctl", "restart", "systemd-journald.service")
	reconfigure(t, "") // the daemon's journal stream, anew
	t.Cleanup(func() {
		os.Remove(conf)
		testbed.MustRun(t, "systemctl", "restart", "systemd-journald.service")
	})

	since := time.Now().Add(-time.Second).Format("2006-01-02 15:04:05")
	answers := floodAs(t, member, "/org/sandboxd1/sandbox/nosuch", "/f", calls)
	if answers.Count[sandboxd1.ErrorNoSuchSandbox] != calls {
		t.Fatalf("the flood's answers: %v; want %d × %s", answers, calls, sandboxd1.ErrorNoSuchSandbox)
	}
	// Another member's refused call, and root's create, right after.
	if answers := floodAs(t, other, "/org/sandboxd1/sandbox/nosuch", "/f", 1); answers.Count[sandboxd1.ErrorNoSuchSandbox] != 1 {
		t.Fatalf("another member's call: %v", answers)
	}
	id, _ := create(t)
	t.Cleanup(func() { ctl(t, "", "destroy", id) })

	testbed.MustRun(t, "journalctl", "--sync")
	journal := testbed.MustRun(t, "journalctl", "--no-pager", "-o", "cat", "-u", "sandboxd.service", "--since", since)
	var refusals, others int
	for _, l := range strings.Split(journal, "\n") {
		for _, f := range strings.Fields(l) {
			switch f {
			case fmt.Sprintf("CALLER_UID=%d", uid):
				refusals++
			case fmt.Sprintf("CALLER_UID=%d", otherUID):
				others++
			}
		}
	}
	t.Logf("the journal since the flood: %d lines, %d of them the member's, %d the other's; the create's: %v",
		strings.Count(journal, "\n"), refusals, others, strings.Contains(journal, "SANDBOX_ID="+id))
	if all := testbed.MustRun(t, "journalctl", "--no-pager", "-o", "cat", "--since", since); strings.Contains(all, "Suppressed") {
		for _, l := range strings.Split(all, "\n") {
			if strings.Contains(l, "Suppressed") {
				t.Logf("journald: %s", l)
			}
		}
	}
	if others != 1 {
		t.Errorf("another member's refusal after the flood: %d lines in the journal; want 1", others)
	}
	if !strings.Contains(journal, "ACTION=CreateSandbox") || !strings.Contains(journal, "SANDBOX_ID="+id) {
		t.Errorf("root's create after the member's flood is not in the journal")
	}
	if refusals > 10+1 {
		t.Errorf("%d journal lines of the member's %d refusals; want at most 10 and a count", refusals, calls)
	}
}
