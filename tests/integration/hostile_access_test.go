package integration

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/sandboxd/sandboxd/tests/testbed"
)

// Two members of group sandboxd, made in the testbed (its /etc is a
// throw-away layer): neither is root nor an admin.
const (
	accAlice = "sbacc-alice"
	accBob   = "sbacc-bob"
)

// accListenEnv makes this test binary a bus listener (see listenForSignals):
// the signal test runs it as the two users.
const accListenEnv = "SANDBOXD_INTEGRATION_LISTEN"

func init() {
	if os.Getenv(accListenEnv) != "" {
		os.Exit(listenForSignals())
	}
}

// accessUsers makes accAlice and accBob, members of group sandboxd, once
// per testbed.
func accessUsers(t *testing.T) {
	t.Helper()
	install(t)
	for _, name := range []string{accAlice, accBob} {
		groupMember(t, name)
	}
}

// accessProject makes a btrfs subvolume owned by owner with mode, holding
// files (name -> content, each root's with the mode given), and deletes it
// at the end of the test.
func accessProject(t *testing.T, name, owner string, mode os.FileMode, files map[string]os.FileMode) string {
	t.Helper()
	tb := testbed.Require(t)
	path := filepath.Join(tb.Btrfs.Mount, name)
	_ = exec.Command("btrfs", "subvolume", "delete", path).Run() // what a failed run left
	testbed.MustRun(t, "btrfs", "subvolume", "create", path)
	t.Cleanup(func() { _ = exec.Command("btrfs", "subvolume", "delete", path).Run() })
	for file, m := range files {
		if err := os.WriteFile(filepath.Join(path, file), []byte(file+" of "+name+"\n"), m); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(filepath.Join(path, file), m); err != nil {
			t.Fatal(err)
		}
	}
	testbed.MustRun(t, "chown", owner, path)
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
	return path
}

// ctlAs runs sandboxctl as user, with the user's groups.
func accCtl(t *testing.T, who string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command("setpriv", append([]string{"--reuid=" + who, "--regid=" + who, "--init-groups", ctlBin()}, args...)...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		return out.String(), errOut.String(), exit.ExitCode()
	case err != nil:
		t.Fatalf("sandboxctl %s as %s: %v", strings.Join(args, " "), who, err)
	}
	return out.String(), errOut.String(), 0
}

func accOK(t *testing.T, who string, args ...string) string {
	t.Helper()
	out, errOut, code := accCtl(t, who, args...)
	if code != 0 {
		t.Fatalf("sandboxctl %s as %s: exit %d: %s%s", strings.Join(args, " "), who, code, out, errOut)
	}
	return out
}

// destroyAtEnd destroys the sandboxes of projects at the end of the test,
// before the configuration that has the projects goes.
func accDestroyAtEnd(t *testing.T, projects ...string) {
	t.Cleanup(func() {
		for _, p := range projects {
			for _, id := range sandboxIDsOf(t, p) {
				ctl(t, "", "destroy", id)
			}
		}
	})
}

func accUID(t *testing.T, name string) string {
	t.Helper()
	u, err := user.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	return u.Uid
}

// A member of group sandboxd may use only the projects it owns or is
// listed in: a project whose directory is root's, mode 0700, is refused to
// it by the daemon (create, list, promote), with AccessDenied naming the
// project and the caller, while root may, and the same member may use its
// own project and one that lists it.
func TestHostileProjectsAreOpenOnlyToTheirUsers(t *testing.T) {
	accessUsers(t)
	rootOnly := accessProject(t, "acc-rootonly", "root:root", 0o700, map[string]os.FileMode{"secret": 0o600})
	own := accessProject(t, "acc-alice", accAlice+":"+accAlice, 0o755, map[string]os.FileMode{"readme": 0o644})
	listed := accessProject(t, "acc-listed", "root:root", 0o755, map[string]os.FileMode{"readme": 0o644})
	// Writable by all, so that alice's sandbox can change it; group root's,
	// of which alice is not a member.
	revoked := accessProject(t, "acc-revoked", "root:root", 0o777, map[string]os.FileMode{"readme": 0o644})
	projects := fmt.Sprintf(`
[[project]]
name = "rootonly"
path = %q
[[project]]
name = "alices"
path = %q
[[project]]
name = "revoked"
path = %q
`, rootOnly, own, revoked)
	reconfigure(t, projects+fmt.Sprintf("users = [%q]\n", accAlice)) // the daemon resolves group sandboxd at its start
	// Cleanups run last first: the added project goes once its sandboxes
	// have, so that the other tests find the projects they expect.
	t.Cleanup(func() {
		if _, errOut, code := ctl(t, "", "project", "remove", "listed"); code != 0 {
			t.Errorf("removing project listed at the end: exit %d: %s", code, errOut)
		}
	})
	accDestroyAtEnd(t, "rootonly", "alices", "listed", "revoked")
	// An added project that lists accAlice, over the bus.
	testbed.MustRun(t, "busctl", "call", "org.sandboxd1", "/org/sandboxd1", "org.sandboxd1.Manager", "AddProjectWithOptions",
		"ssa{sv}", "listed", listed, "1", "Users", "as", "1", accAlice)
	uid := accUID(t, accAlice)

	// Refused, by the daemon, in words that name the project and the caller.
	out, errOut, code := accCtl(t, accAlice, "create", "rootonly")
	want := fmt.Sprintf(`uid %s may not use project "rootonly"`, uid)
	if code == 0 || !strings.Contains(errOut, want) {
		t.Errorf("create rootonly as %s: exit %d, %q%q; want a refusal saying %q", accAlice, code, out, errOut, want)
	}
	bus := exec.Command("setpriv", "--reuid="+accAlice, "--regid="+accAlice, "--init-groups",
		"busctl", "call", "org.sandboxd1", "/org/sandboxd1", "org.sandboxd1.Manager", "CreateSandbox", "sa{sv}", "rootonly", "0")
	if b, err := bus.CombinedOutput(); err == nil || !strings.Contains(string(b), want) {
		t.Errorf("busctl CreateSandbox rootonly as %s: %v, %q; want the daemon's refusal saying %q", accAlice, err, b, want)
	}
	if list := accOK(t, accAlice, "project", "list"); strings.Contains(list, "rootonly") || !strings.Contains(list, "alices") {
		t.Errorf("project list as %s shows a project it may not use, or hides its own:\n%s", accAlice, list)
	}
	// The controls: accAlice may use its own project and the listed ones;
	// root may use rootonly.
	mine := strings.TrimSpace(accOK(t, accAlice, "create", "--quiet", "alices"))
	accOK(t, accAlice, "create", "--quiet", "listed")
	later := strings.TrimSpace(accOK(t, accAlice, "create", "--quiet", "revoked"))
	ok(t, "create", "--quiet", "rootonly")
	if list := ok(t, "project", "list"); !strings.Contains(list, "rootonly") {
		t.Errorf("project list as root lacks rootonly:\n%s", list)
	}

	// Promote: accAlice's own project takes it; once revoked takes accAlice off
	// its users, accAlice's sandbox of it may not be promoted into it.
	accOK(t, accAlice, "exec", mine, "--", "sh", "-c", "echo promoted > new.txt")
	accOK(t, accAlice, "promote", mine)
	accWaitFile(t, filepath.Join(own, "new.txt"))
	accOK(t, accAlice, "exec", later, "--", "sh", "-c", "echo sneaked > sneaked.txt")
	reconfigure(t, projects)
	out, errOut, code = accCtl(t, accAlice, "promote", later)
	want = fmt.Sprintf(`uid %s may not use project "revoked"`, uid)
	if code == 0 || !strings.Contains(errOut, want) {
		t.Errorf("promote into revoked as %s: exit %d, %q%q; want a refusal saying %q", accAlice, code, out, errOut, want)
	}
	time.Sleep(200 * time.Millisecond)
	if _, err := os.Stat(filepath.Join(revoked, "sneaked.txt")); err == nil {
		t.Errorf("accAlice's change reached project revoked")
	}
}

func accWaitFile(t *testing.T, path string) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if _, err := os.Stat(path); err == nil {
			return
		}
	}
	t.Fatalf("%s did not appear within 20s", path)
}

// `diff --text` is written by the daemon, which is root: a file the caller
// cannot read on the host (root's, mode 0600), deleted in the caller's
// sandbox, is named but its content not shown; a file it can read is
// shown, and root's diff of the same sandbox shows both (the control).
func TestHostileDiffTextShowsOnlyWhatTheCallerCanRead(t *testing.T) {
	accessUsers(t)
	own := accessProject(t, "acc-difftext", "root:root", 0o755, map[string]os.FileMode{"secret": 0o600, "public": 0o644})
	testbed.MustRun(t, "chown", accAlice+":"+accAlice, own) // accAlice's project, root's files in it
	reconfigure(t, fmt.Sprintf("[[project]]\nname = \"difftext\"\npath = %q\n", own))
	accDestroyAtEnd(t, "difftext")

	id := strings.TrimSpace(accOK(t, accAlice, "create", "--quiet", "difftext"))
	accOK(t, accAlice, "exec", id, "--", "rm", "-f", "secret", "public")
	asRoot := ok(t, "diff", "--text", id)
	if !strings.Contains(asRoot, "-secret of acc-difftext") || !strings.Contains(asRoot, "-public of acc-difftext") {
		t.Fatalf("root's diff --text lacks a deleted file's content (the control):\n%s", asRoot)
	}
	out := accOK(t, accAlice, "diff", "--text", id)
	if strings.Contains(out, "secret of acc-difftext") {
		t.Errorf("accAlice's diff --text shows root's 0600 file:\n%s", out)
	}
	want := fmt.Sprintf("Content not shown: a/secret is not readable by uid %s", accUID(t, accAlice))
	if !strings.Contains(out, want) || !strings.Contains(out, "-public of acc-difftext") {
		t.Errorf("accAlice's diff --text lacks %q or the public file's content:\n%s", want, out)
	}
}

// A sandbox's signals (SandboxNew, StateChanged, SandboxRemoved) name it:
// another member of the group, listening on the bus, hears none of them,
// while the owner's own listener does.
func TestHostileSignalsReachOnlyTheOwner(t *testing.T) {
	accessUsers(t)
	own := accessProject(t, "acc-signals", accAlice+":"+accAlice, 0o755, nil)
	reconfigure(t, fmt.Sprintf("[[project]]\nname = \"signals\"\npath = %q\n", own))
	accDestroyAtEnd(t, "signals")
	bin, _ := memberBinary(t)

	owner := accListen(t, bin, accAlice)
	other := accListen(t, bin, accBob)
	id := strings.TrimSpace(accOK(t, accAlice, "create", "--quiet", "signals"))
	accOK(t, accAlice, "freeze", id)
	accOK(t, accAlice, "destroy", id)

	conn, err := dbus.ConnectSystemBus()
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	heardByOwner := owner.heard(t, conn)
	heardByOther := other.heard(t, conn)
	for _, sig := range []string{"SandboxNew " + id, "StateChanged " + id + " frozen", "SandboxRemoved " + id} {
		if !strings.Contains(heardByOwner, "org.sandboxd1.Manager."+sig) {
			t.Errorf("the owner's listener did not hear %s (the control); it heard:\n%s", sig, heardByOwner)
		}
	}
	if strings.Contains(heardByOther, id) {
		t.Errorf("another member of group sandboxd heard about %s's sandbox %s:\n%s", accAlice, id, heardByOther)
	}
}

// memberBinary is a copy of this test binary that other users may run
// (see memberReexec), in a directory of its own where they may also
// write (sticky), e.g. a file that says they are ready.
func memberBinary(t *testing.T) (bin, dir string) {
	t.Helper()
	dir, err := os.MkdirTemp("/var/tmp", "member-helper-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o1777); err != nil {
		t.Fatal(err)
	}
	src, err := os.Open(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	bin = filepath.Join(dir, "holder") // the name the adoption test looks for in its refusal
	dst, err := os.OpenFile(bin, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	return bin, dir
}

// memberReexec is the command that runs bin (memberBinary's) as member
// with args and env (NAME=VALUE), which makes this test binary, in its
// init, the helper that member runs.
func memberReexec(bin, member, env string, args ...string) *exec.Cmd {
	cmd := exec.Command("setpriv", append([]string{"--reuid=" + member, "--regid=" + member, "--init-groups", bin}, args...)...)
	cmd.Env = append(os.Environ(), env)
	return cmd
}

const accMarker = "org.sandboxd1test.Access"

type accListener struct {
	cmd *exec.Cmd
	out *bufio.Reader
}

func accListen(t *testing.T, bin, who string) *accListener {
	t.Helper()
	cmd := memberReexec(bin, who, accListenEnv+"=1")
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	l := &accListener{cmd: cmd, out: bufio.NewReader(stdout)}
	if line, err := l.out.ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("listener as %s: %q, %v; want ready", who, line, err)
	}
	return l
}

// heard sends the marker and returns what the listener printed before it.
func (l *accListener) heard(t *testing.T, conn *dbus.Conn) string {
	t.Helper()
	if err := conn.Emit("/org/sandboxd1test", accMarker+".Marker"); err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(l.out)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.cmd.Wait(); err != nil {
		t.Fatalf("listener: %v; it printed %q", err, data)
	}
	return string(data)
}

// listenForSignals prints every signal of org.sandboxd1 it hears (its
// name and body) until the marker, as a client that watches the daemon
// would: it subscribes, then makes a call (the daemon signals to the
// connections that called it).
func listenForSignals() int {
	conn, err := dbus.ConnectSystemBus()
	if err != nil {
		fmt.Fprintln(os.Stderr, "listener:", err)
		return 2
	}
	defer conn.Close()
	for _, m := range [][]dbus.MatchOption{{dbus.WithMatchSender("org.sandboxd1")}, {dbus.WithMatchInterface(accMarker)}} {
		if err := conn.AddMatchSignal(m...); err != nil {
			fmt.Fprintln(os.Stderr, "listener:", err)
			return 2
		}
	}
	ch := make(chan *dbus.Signal, 100)
	conn.Signal(ch)
	if err := conn.Object("org.sandboxd1", "/org/sandboxd1").Call("org.sandboxd1.Manager.ListSandboxes", 0).Err; err != nil {
		fmt.Fprintln(os.Stderr, "listener:", err)
		return 2
	}
	fmt.Println("ready")
	timeout := time.After(60 * time.Second)
	for {
		select {
		case sig := <-ch:
			if strings.HasPrefix(sig.Name, accMarker+".") {
				return 0
			}
			fmt.Println(sig.Name, strings.Trim(fmt.Sprint(sig.Body), "[]"))
		case <-timeout:
			fmt.Fprintln(os.Stderr, "listener: no marker within 60s")
			return 2
		}
	}
}

// A command's arguments may hold a secret: the journal, which more than
// root may read, names only its program and size; the whole command line
// is kept in the audit log, root's alone (the control: the daemon saw it).
func TestHostileArgvStaysOutOfTheJournal(t *testing.T) {
	install(t)
	secret := fmt.Sprintf("ARGV-SECRET-%d", time.Now().UnixNano())
	since := time.Now().Add(-time.Second).Format("2006-01-02 15:04:05")
	id := strings.TrimSpace(ok(t, "create", "--quiet", "web"))
	t.Cleanup(func() { ctl(t, "", "destroy", id) })
	ok(t, "exec", id, "--", "sh", "-c", "true "+secret)

	audit, err := os.ReadFile("/var/log/sandboxd/audit.log")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(audit), secret) {
		t.Fatalf("the audit log lacks the command line (the control)")
	}
	if st, err := os.Stat("/var/log/sandboxd/audit.log"); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("the audit log: %v, mode %v; want 0600", err, st.Mode())
	}
	testbed.MustRun(t, "journalctl", "--sync")
	journal := testbed.MustRun(t, "journalctl", "--no-pager", "-o", "json", "-u", "sandboxd.service", "--since", since)
	if strings.Contains(journal, secret) {
		t.Errorf("the journal holds a command's arguments:\n%s", journal)
	}
	if !strings.Contains(journal, `sh (`) {
		t.Errorf("the journal does not name the command's program:\n%s", journal)
	}
}
