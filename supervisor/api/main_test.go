package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/sandboxd1"
	"github.com/sandboxd/sandboxd/supervisor"
	"github.com/sandboxd/sandboxd/supervisor/api"
	"github.com/sandboxd/sandboxd/supervisor/api/access"
	"github.com/sandboxd/sandboxd/supervisor/state"
	"github.com/sandboxd/sandboxd/supervisor/supervisortest"
	"github.com/sandboxd/sandboxd/tests/testbed"
)

// helperEnv, when set, makes the test binary a bus client (see helper):
// the tests run it as other users.
const helperEnv = "SANDBOXD_API_TEST_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(helper(os.Args[1:]))
	}
	supervisortest.Main(m)
}

// ctx is the daemon's own: the tests call the supervisor as it does.
var ctx = supervisor.WithActor(context.Background(), supervisor.Daemon("test"))

// Users and groups made in the testbed (its /etc is a throw-away layer).
const (
	creatorsGroup = "sbapi-creators" // Access.CreatorGIDs in the tests that need it
	memberUser    = "sbapi-member"   // in group sandboxd only: the bus lets it in
	creatorUser   = "sbapi-creator"  // in sandboxd and sbapi-creators
)

// account is a user to run the helper as.
type account struct {
	name string
	uid  uint32
	gid  uint32
	gids []uint32 // supplementary groups
}

var nobody = account{name: "nobody", uid: 65534, gid: 65534}

// busReady is set once the policy and the accounts are in this testbed.
var (
	busReady  bool
	helperBin string
	accounts  = map[string]account{}
)

// setupBus installs the shipped bus policy and makes the accounts, once
// per testbed.
func setupBus(t *testing.T) {
	t.Helper()
	testbed.Require(t)
	if busReady {
		return
	}
	policy, err := os.ReadFile("../../packaging/dbus/org.sandboxd1.conf")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile("/etc/dbus-1/system.d/org.sandboxd1.conf", policy, 0o644); err != nil {
		t.Fatal(err)
	}
	// The policy names group sandboxd: the bus resolves it when it loads
	// the policy, so the group comes first.
	testbed.MustRun(t, "groupadd", "--force", access.DefaultGroup)
	testbed.MustRun(t, "groupadd", "--force", creatorsGroup)
	testbed.MustRun(t, "useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", "--groups", access.DefaultGroup, memberUser)
	testbed.MustRun(t, "useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", "--groups", access.DefaultGroup+","+creatorsGroup, creatorUser)
	testbed.MustRun(t, "busctl", "call", "org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus", "ReloadConfig")
	for _, name := range []string{memberUser, creatorUser} {
		accounts[name] = lookupAccount(t, name)
	}

	// The helper is this binary, copied where other users may run it (the
	// build directory is root's alone).
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "sbapi-helper")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	helperBin = filepath.Join(dir, "helper")
	if err := os.WriteFile(helperBin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	busReady = true
}

func lookupAccount(t *testing.T, name string) account {
	t.Helper()
	u, err := user.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	a := account{name: name, uid: atou(t, u.Uid), gid: atou(t, u.Gid)}
	ids, err := u.GroupIds()
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		a.gids = append(a.gids, atou(t, id))
	}
	return a
}

func atou(t *testing.T, s string) uint32 {
	t.Helper()
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		t.Fatal(err)
	}
	return uint32(n)
}

func gidOf(t *testing.T, group string) uint32 {
	t.Helper()
	gid, err := access.GroupID(group)
	if err != nil {
		t.Fatal(err)
	}
	return gid
}

// runErr runs a command and returns what it printed, and its failure.
func runErr(argv ...string) (string, error) {
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	return string(out), err
}

// env is a supervisor on a fresh btrfs root with one project, "web",
// served on the system bus.
type env struct {
	sup     *supervisor.Supervisor
	rooms   api.Rooms
	cfg     supervisor.Config // what sup was made with, to make another
	fs      cowfs.Backend
	store   *state.Store
	project string // the project's path
	srv     *api.Server
	srvConn *dbus.Conn
}

// newEnv serves a new supervisor with access; everything it makes is
// destroyed when the test ends.
func newEnv(t *testing.T, access access.Policy) *env {
	t.Helper()
	setupBus(t)
	se := supervisortest.New(t, "api", testLog(t))
	e := &env{sup: se.Sup, rooms: roomsOf(se), cfg: se.Config, fs: se.FS, store: se.Store, project: se.Project}
	var err error
	e.srvConn = systemBus(t)
	e.srv, err = api.Serve(ctx, e.srvConn, e.sup, e.rooms, access, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.srv.Close(); err != nil {
			t.Errorf("closing the server: %v", err)
		}
	})
	return e
}

// reserve serves the same supervisor again with other access rules.
func (e *env) reserve(t *testing.T, access access.Policy) {
	t.Helper()
	if err := e.srv.Close(); err != nil {
		t.Fatal(err)
	}
	e.srvConn = systemBus(t)
	srv, err := api.Serve(ctx, e.srvConn, e.sup, e.rooms, access, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // before its connection closes
		if err := srv.Close(); err != nil {
			t.Errorf("closing the server: %v", err)
		}
	})
	e.srv = srv
}

// testLog sends the server's log to the test's, so a failure shows the
// audit trail.
func testLog(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// systemBus is a new private connection to the system bus.
func systemBus(t *testing.T) *dbus.Conn {
	t.Helper()
	conn, err := dbus.ConnectSystemBus()
	if err != nil {
		t.Fatalf("connecting to the system bus: %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// client is a root client of the API on its own connection.
type client struct {
	t    *testing.T
	conn *dbus.Conn
}

func newClient(t *testing.T) *client {
	return &client{t: t, conn: systemBus(t)}
}

func (c *client) manager() dbus.BusObject {
	return c.conn.Object(sandboxd1.BusName, sandboxd1.ManagerPath)
}

func (c *client) create(project string, opts map[string]dbus.Variant) (string, dbus.ObjectPath, error) {
	if opts == nil {
		opts = map[string]dbus.Variant{}
	}
	var id string
	var path dbus.ObjectPath
	err := c.manager().CallWithContext(ctx, sandboxd1.ManagerInterface+".CreateSandbox", 0, project, opts).Store(&id, &path)
	return id, path, err
}

func (c *client) mustCreate(opts map[string]dbus.Variant) (string, dbus.ObjectPath) {
	c.t.Helper()
	id, path, err := c.create("web", opts)
	if err != nil {
		c.t.Fatalf("CreateSandbox(web, %v): %v", opts, err)
	}
	return id, path
}

func (c *client) list() ([]sandboxd1.ListEntry, error) {
	var out []sandboxd1.ListEntry
	err := c.manager().CallWithContext(ctx, sandboxd1.ManagerInterface+".ListSandboxes", 0).Store(&out)
	return out, err
}

func (c *client) get(id string) (dbus.ObjectPath, error) {
	var path dbus.ObjectPath
	err := c.manager().CallWithContext(ctx, sandboxd1.ManagerInterface+".GetSandbox", 0, id).Store(&path)
	return path, err
}

func (c *client) destroy(id string) error {
	return c.manager().CallWithContext(ctx, sandboxd1.ManagerInterface+".DestroySandbox", 0, id).Err
}

func (c *client) props(path dbus.ObjectPath) (map[string]dbus.Variant, error) {
	var props map[string]dbus.Variant
	err := c.conn.Object(sandboxd1.BusName, path).CallWithContext(ctx, "org.freedesktop.DBus.Properties.GetAll", 0, sandboxd1.SandboxInterface).Store(&props)
	return props, err
}

func (c *client) prop(path dbus.ObjectPath, name string) (any, error) {
	var v dbus.Variant
	err := c.conn.Object(sandboxd1.BusName, path).CallWithContext(ctx, "org.freedesktop.DBus.Properties.Get", 0, sandboxd1.SandboxInterface, name).Store(&v)
	return v.Value(), err
}

// signals subscribes to what org.sandboxd1 broadcasts.
func (c *client) signals() chan *dbus.Signal {
	c.t.Helper()
	if err := c.conn.AddMatchSignal(dbus.WithMatchSender(sandboxd1.BusName)); err != nil {
		c.t.Fatal(err)
	}
	ch := make(chan *dbus.Signal, 100)
	c.conn.Signal(ch)
	return ch
}

// waitSignal waits for the signal name (interface.member) with first
// argument arg0, skipping others.
func waitSignal(t *testing.T, ch chan *dbus.Signal, name string, arg0 any) *dbus.Signal {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case sig := <-ch:
			if sig.Name == name && len(sig.Body) > 0 && sig.Body[0] == arg0 {
				return sig
			}
		case <-deadline:
			t.Fatalf("no signal %s(%v, ...) within 10s", name, arg0)
		}
	}
}

// errorName is the D-Bus error name of err ("" when it is not one).
func errorName(err error) string {
	var derr dbus.Error
	if errors.As(err, &derr) {
		return derr.Name
	}
	return ""
}

// wantError checks that err is the D-Bus error name and that its message
// has each of words.
func wantError(t *testing.T, what string, err error, name string, words ...string) {
	t.Helper()
	if got := errorName(err); got != name {
		t.Errorf("%s: error %q (%v); want %s", what, got, err, name)
		return
	}
	for _, w := range words {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%s: message %q does not say %q", what, err.Error(), w)
		}
	}
}

// helperResult is what the helper prints: the call's D-Bus error, if any,
// and what it returned.
type helperResult struct {
	ErrorName string   `json:"error_name,omitempty"`
	Error     string   `json:"error,omitempty"`
	Result    []string `json:"result,omitempty"`
}

// helper is the test binary as a client, run as another user:
//
//	create PROJECT | list | get ID | destroy ID | prop PATH NAME
//	listprojects | addproject NAME LOCATION | removeproject NAME
//	listen     print the member of each org.sandboxd1 signal, one a line,
//	           after "ready", until the marker signal
func helper(args []string) int {
	conn, err := dbus.ConnectSystemBus()
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 2
	}
	defer conn.Close()
	if len(args) == 1 && args[0] == "listen" {
		return listen(conn)
	}
	var res helperResult
	mgr := conn.Object(sandboxd1.BusName, sandboxd1.ManagerPath)
	switch {
	case len(args) == 2 && args[0] == "create":
		var id string
		var path dbus.ObjectPath
		err = mgr.Call(sandboxd1.ManagerInterface+".CreateSandbox", 0, args[1], map[string]dbus.Variant{}).Store(&id, &path)
		res.Result = []string{id, string(path)}
	case len(args) == 1 && args[0] == "list":
		var list []sandboxd1.ListEntry
		err = mgr.Call(sandboxd1.ManagerInterface+".ListSandboxes", 0).Store(&list)
		res.Result = []string{}
		for _, e := range list {
			res.Result = append(res.Result, e.ID)
		}
	case len(args) == 2 && args[0] == "get":
		var path dbus.ObjectPath
		err = mgr.Call(sandboxd1.ManagerInterface+".GetSandbox", 0, args[1]).Store(&path)
		res.Result = []string{string(path)}
	case len(args) == 2 && args[0] == "find":
		var e sandboxd1.ListEntry
		err = mgr.Call(sandboxd1.ManagerInterface+".FindSandbox", 0, args[1]).Store(&e)
		res.Result = []string{e.ID}
	case len(args) == 2 && args[0] == "destroy":
		err = mgr.Call(sandboxd1.ManagerInterface+".DestroySandbox", 0, args[1]).Err
	case len(args) == 1 && args[0] == "listprojects":
		var list []sandboxd1.ProjectEntry
		err = mgr.Call(sandboxd1.ManagerInterface+".ListProjects", 0).Store(&list)
		res.Result = []string{}
		for _, p := range list {
			res.Result = append(res.Result, p.Name+" "+p.Location+" "+p.Origin)
		}
	case len(args) == 3 && args[0] == "addproject":
		err = mgr.Call(sandboxd1.ManagerInterface+".AddProject", 0, args[1], args[2]).Err
	case len(args) == 2 && args[0] == "removeproject":
		err = mgr.Call(sandboxd1.ManagerInterface+".RemoveProject", 0, args[1]).Err
	case len(args) == 3 && args[0] == "prop":
		var v dbus.Variant
		err = conn.Object(sandboxd1.BusName, dbus.ObjectPath(args[1])).Call("org.freedesktop.DBus.Properties.Get", 0, sandboxd1.SandboxInterface, args[2]).Store(&v)
		res.Result = []string{fmt.Sprint(v.Value())}
	default:
		fmt.Fprintf(os.Stderr, "helper: unknown request %q\n", args)
		return 2
	}
	if err != nil {
		res.ErrorName, res.Error = errorName(err), err.Error()
		res.Result = nil
	}
	if err := json.NewEncoder(os.Stdout).Encode(res); err != nil {
		return 2
	}
	return 0
}

// The marker signal: sent by the test from a connection that is not
// sandboxd's, after the signals under test. The bus routes messages in
// the order it reads them, so a listener that has the marker has been
// given everything sent before it.
const (
	markerPath  = dbus.ObjectPath("/org/sandboxd1test")
	markerIface = "org.sandboxd1test"
)

func listen(conn *dbus.Conn) int {
	if err := conn.AddMatchSignal(dbus.WithMatchSender(sandboxd1.BusName)); err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 2
	}
	if err := conn.AddMatchSignal(dbus.WithMatchInterface(markerIface)); err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 2
	}
	ch := make(chan *dbus.Signal, 100)
	conn.Signal(ch)
	// The daemon sends its signals to the connections that called it
	// (refused by the bus or not, it does not matter here).
	_ = conn.Object(sandboxd1.BusName, sandboxd1.ManagerPath).Call(sandboxd1.ManagerInterface+".ListSandboxes", 0).Err
	fmt.Println("ready")
	timeout := time.After(30 * time.Second)
	for {
		select {
		case sig := <-ch:
			if strings.HasPrefix(sig.Name, markerIface+".") {
				fmt.Println("marker")
				return 0
			}
			if strings.HasPrefix(sig.Name, "org.sandboxd1.") {
				fmt.Println(sig.Name)
			}
		case <-timeout:
			fmt.Fprintln(os.Stderr, "helper: no marker within 30s")
			return 2
		}
	}
}

// as runs the helper as a, with a's groups as the process's own (which is
// what the bus policy and the daemon judge a caller by).
func as(a account, args ...string) *exec.Cmd {
	cmd := exec.Command(helperBin, args...)
	cmd.Env = append(os.Environ(), helperEnv+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: a.uid, Gid: a.gid, Groups: a.gids}}
	return cmd
}

// callAs runs one helper request as a.
func callAs(t *testing.T, a account, args ...string) helperResult {
	t.Helper()
	cmd := as(a, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helper %v as %s: %v\n%s", args, a.name, err, stderr.String())
	}
	var res helperResult
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("helper %v as %s printed %q: %v", args, a.name, out, err)
	}
	return res
}

// listener is a helper listening for signals as some account.
type listener struct {
	cmd *exec.Cmd
	out *bufio.Reader
}

func listenAs(t *testing.T, a account) *listener {
	t.Helper()
	cmd := as(a, "listen")
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	l := &listener{cmd: cmd, out: bufio.NewReader(stdout)}
	if line, err := l.out.ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("listener as %s: %q, %v; want ready", a.name, line, err)
	}
	return l
}

// heard sends the marker and returns the org.sandboxd1 signals the
// listener got before it.
func (l *listener) heard(t *testing.T, c *client) []string {
	t.Helper()
	if err := c.conn.Emit(markerPath, markerIface+".Marker"); err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(l.out)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.cmd.Wait(); err != nil {
		t.Fatalf("listener: %v; it printed %q", err, data)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) == 0 || lines[len(lines)-1] != "marker" {
		t.Fatalf("listener printed %q; want the marker last", data)
	}
	return lines[:len(lines)-1]
}

// roomsOf are the rooms of se, as the daemon serves them.
func roomsOf(se *supervisortest.Env) api.Rooms {
	r := api.Rooms{}
	r.Ports = se.Ports

	r.Caches = se.Caches

	r.Commands = se.Commands

	r.Checkpoints = se.Checkpoints

	r.Promotion = se.Promotion

	r.Adoptions = se.Adoptions

	r.Try = se.Try

	r.Forks = se.Forks

	r.Limits = se.Limits

	r.Metrics = se.Metrics

	return r
}
