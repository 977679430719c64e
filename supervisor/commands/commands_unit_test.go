package commands

// The room's logic without root: over a fake Host (supervisor/hosttest)
// whose sandboxes have no init, so that what is checked is what the room
// decides before and after it asks one. Named Unit*: a -run pattern picks
// them, and they run as any user.

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/runtime/nsinit"
	"github.com/sandboxd/sandboxd/supervisor"
	"github.com/sandboxd/sandboxd/supervisor/hosttest"
	"github.com/sandboxd/sandboxd/supervisor/state"
)

// fakeHost is hosttest's Host with what the room asks of the core
// besides; requests counts the commands' requests made (each asks the
// pool where the sandbox's project is).
type fakeHost struct {
	*hosttest.Host
	noUserNS error
	requests int
}

func (f *fakeHost) UserNSUnavailable() error { return f.noUserNS }

// projectPool is a pool that knows where each project is (/project) and
// counts the requests that ask it.
type projectPool struct {
	cowfs.Backend
	h *fakeHost
}

func (p projectPool) Project(_ context.Context, location string) (cowfs.Volume, error) {
	p.h.requests++
	return cowfs.Volume{Name: location, Path: "/project"}, nil
}

// The room is a Runner, for promotion's checks and try.
var _ Runner = (*Commands)(nil)

var ctx = supervisor.WithActor(context.Background(), supervisor.Daemon("test"))

// newUnit is a room over a fake host that holds sandbox "sb1", ready
// and with no user namespace, whose init is not there.
func newUnit(t *testing.T) (*Commands, *fakeHost) {
	t.Helper()
	h := &fakeHost{Host: hosttest.New(t, nil, nil), noUserNS: errors.New("the pool is on zfs-fuse")}
	h.B = projectPool{h: h}
	h.AddSandbox(t, state.Record{ID: "sb1", Project: "web", Owner: 1000})
	return New(h), h
}

// stdio is what Exec wants of a caller: three files (never read here).
var stdio = []*os.File{os.Stdin, os.Stdout, os.Stderr}

func TestUnitNewJoinsTheHost(t *testing.T) {
	_, h := newUnit(t)
	refusals := h.Hooks().Refusals.Funcs()
	for _, err := range []error{ErrNoCommand, ErrNoProcess, ErrNoSession, ErrNoFile, ErrNotBooted} {
		if !slices.Contains(refusals, err) {
			t.Errorf("refusal %q not registered", err)
		}
	}
	if len(h.Hooks().Busy.Funcs()) != 1 || len(h.Hooks().Started.Funcs()) != 1 || len(h.Hooks().Stopped.Funcs()) != 1 {
		t.Errorf("hooks joined: busy %d, started %d, stopped %d; want one each",
			len(h.Hooks().Busy.Funcs()), len(h.Hooks().Started.Funcs()), len(h.Hooks().Stopped.Funcs()))
	}
}

// Commands are kept by sandbox and id: one sandbox's is not another's,
// even where their ids share a beginning.
func TestUnitCommandTableIsBySandbox(t *testing.T) {
	c, h := newUnit(t)
	cmd := &Command{ID: newID(), Sandbox: "sb1", done: make(chan struct{})}
	c.cmds.add(cmd)
	if got, ok := c.Command("sb1", cmd.ID); !ok || got != cmd {
		t.Fatalf("Command(sb1, %s) = %v, %v", cmd.ID, got, ok)
	}
	if _, ok := c.Command("sb2", cmd.ID); ok {
		t.Error("another sandbox's command was found")
	}
	if !c.cmds.has("sb1") || c.cmds.has("sb") || c.cmds.has("sb12") {
		t.Errorf("has: sb1 %v, sb %v, sb12 %v; want only sb1", c.cmds.has("sb1"), c.cmds.has("sb"), c.cmds.has("sb12"))
	}
	if !h.Busy(ctx, "sb1") {
		t.Error("a sandbox that runs a command is not busy")
	}
	c.cmds.remove(cmd)
	if c.cmds.has("sb1") {
		t.Error("a command removed is still there")
	}
	err := c.Signal(ctx, "sb1", cmd.ID, syscall.SIGTERM)
	if !errors.Is(err, ErrNoCommand) || !strings.Contains(err.Error(), "signalling command "+cmd.ID+" of sandbox sb1") {
		t.Errorf("signalling a command that ended: %v; want ErrNoCommand naming it", err)
	}
	if a, b := newID(), newID(); len(a) != 8 || a == b {
		t.Errorf("ids %q and %q; want 8 hex digits, each new", a, b)
	}
}

// A file call under way keeps its sandbox busy; a sandbox whose init
// cannot say what runs is busy too (unknown is not idle).
func TestUnitBusy(t *testing.T) {
	c, h := newUnit(t)
	end := c.files.start("sb1")
	if !c.files.running("sb1") || c.files.running("sb2") {
		t.Fatal("a file call is not counted for its sandbox alone")
	}
	if !h.Busy(ctx, "sb1") {
		t.Error("a sandbox with a file call under way is not busy")
	}
	end()
	if c.files.running("sb1") {
		t.Error("a file call that ended is still counted")
	}
	if !h.Busy(ctx, "sb1") {
		t.Error("a sandbox whose init does not answer is not busy")
	}
}

// Exec refuses what the sandbox does not allow before it asks the init,
// and audits each refusal; a start that fails leaves no command.
func TestUnitExecRefusesBeforeTheInit(t *testing.T) {
	c, h := newUnit(t)
	h.AddSandbox(t, state.Record{ID: "frozen", State: state.Frozen})
	for _, tc := range []struct {
		what, id string
		o        ExecOptions
		want     error
		words    string
	}{
		{"no sandbox", "nosuch", ExecOptions{Argv: []string{"true"}, Stdio: stdio}, supervisor.ErrNotFound, ""},
		{"no stdio", "sb1", ExecOptions{Argv: []string{"true"}, UID: 1000}, supervisor.ErrInvalid, "want stdin, stdout and stderr"},
		{"no command", "sb1", ExecOptions{UID: 1000, Stdio: stdio}, supervisor.ErrInvalid, "no command given"},
		{"a frozen sandbox", "frozen", ExecOptions{Argv: []string{"true"}, Stdio: stdio}, supervisor.ErrWrongState, "it is frozen"},
		{"root for a user", "sb1", ExecOptions{Argv: []string{"true"}, UID: 1000, AsRoot: true, Stdio: stdio}, supervisor.ErrNoIdmap, "zfs-fuse"},
	} {
		if _, err := c.Exec(ctx, tc.id, tc.o); !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.words) {
			t.Errorf("exec with %s: %v; want %v saying %q", tc.what, err, tc.want, tc.words)
		}
	}
	if h.requests != 0 {
		t.Errorf("%d requests made for refused commands; want none", h.requests)
	}
	// Root's own AsRoot in a sandbox without a user namespace is the
	// host's root, which root may be: it goes on to the init (not there).
	_, err := c.Exec(ctx, "sb1", ExecOptions{Argv: []string{"true"}, AsRoot: true, Stdio: stdio})
	if !errors.Is(err, nsinit.ErrNotRunning) || !strings.Contains(err.Error(), "running a command in sandbox sb1") {
		t.Errorf("exec with no init: %v; want ErrNotRunning", err)
	}
	if c.cmds.has("sb1") {
		t.Error("a command that did not start is in the table")
	}
	// Each audited but the one of no sandbox, which has no record.
	audits := h.Audits()
	for _, a := range audits {
		if a.Entry.Action != "exec" || a.Err == nil {
			t.Errorf("audited %+v; want a failed exec", a)
		}
	}
	if len(audits) != 5 {
		t.Errorf("%d execs audited; want 5", len(audits))
	}
	if h.Touches("sb1") == 0 {
		t.Error("exec did not wake the sandbox")
	}
}

// Background processes need the sandbox running and its init there;
// a signal is 1..64; the init's refusals name the room's sentinels
// (ReadLog past a log's end is the caller's mistake).
func TestUnitProcessesNeedARunningInit(t *testing.T) {
	c, h := newUnit(t)
	h.AddSandbox(t, state.Record{ID: "stopped", State: state.Stopped})
	if _, err := c.ListProcesses(ctx, "stopped"); !errors.Is(err, supervisor.ErrWrongState) {
		t.Errorf("listing a stopped sandbox's processes: %v; want ErrWrongState", err)
	}
	if _, err := c.ReadLog(ctx, "sb1", "p1", 0, 100); !errors.Is(err, nsinit.ErrNotRunning) {
		t.Errorf("reading a log with no init: %v; want ErrNotRunning", err)
	}
	if _, err := c.Spawn(ctx, "sb1", ExecOptions{Argv: []string{"sleep", "1"}, UID: 1000}); !errors.Is(err, nsinit.ErrNotRunning) {
		t.Errorf("spawning with no init: %v; want ErrNotRunning", err)
	}
	if err := h.Start(ctx, "sb1", 4242, false); err != nil {
		t.Fatal(err)
	}
	for _, sig := range []syscall.Signal{0, 65, -1} {
		if err := c.SignalProcess(ctx, "sb1", "p1", sig); !errors.Is(err, supervisor.ErrInvalid) || !strings.Contains(err.Error(), "want 1..64") {
			t.Errorf("signal %d: %v; want ErrInvalid", sig, err)
		}
	}
	for _, tc := range []struct {
		in, want error
	}{
		{nil, nil},
		{nsinit.ErrNoProcess, ErrNoProcess},
		{nsinit.ErrPastEnd, supervisor.ErrInvalid},
		{nsinit.ErrNotRunning, nsinit.ErrNotRunning},
	} {
		err := processError("sb1", tc.in)
		if !errors.Is(err, tc.want) || (tc.in == nil) != (err == nil) {
			t.Errorf("processError(%v) = %v; want %v", tc.in, err, tc.want)
		}
		if err != nil && !errors.Is(err, tc.in) {
			t.Errorf("processError(%v) = %v; lost the init's error", tc.in, err)
		}
	}
	// The watch of an init's processes stops with it, and never
	// started here: nothing to wait for.
	h.Stop("sb1")
}

// An init found again after a restart is watched only if its layer kept
// a process's log (a daemon beside a thousand sandboxes asks those).
func TestUnitHadProcessesAsksOnlyLayersWithLogs(t *testing.T) {
	dir := t.TempDir()
	fs := layers{dir: dir}
	h := &fakeHost{Host: hosttest.New(t, fs, nil)}
	c := New(h)
	if !c.hadProcesses(ctx, state.Record{ID: "a"}) {
		t.Error("a tmpfs layer: want true (cannot be told)")
	}
	if !c.hadProcesses(ctx, state.Record{ID: "a", Layer: "missing"}) {
		t.Error("a layer that cannot be had: want true")
	}
	if err := os.MkdirAll(filepath.Join(dir, "none"), 0o755); err != nil {
		t.Fatal(err)
	}
	if c.hadProcesses(ctx, state.Record{ID: "a", Layer: "none"}) {
		t.Error("a layer with no processes directory: want false")
	}
	if err := os.MkdirAll(filepath.Join(dir, "empty", "processes"), 0o755); err != nil {
		t.Fatal(err)
	}
	if c.hadProcesses(ctx, state.Record{ID: "a", Layer: "empty"}) {
		t.Error("a layer whose processes directory is empty: want false")
	}
	if err := os.MkdirAll(filepath.Join(dir, "one", "processes", "p1"), 0o755); err != nil {
		t.Fatal(err)
	}
	if !c.hadProcesses(ctx, state.Record{ID: "a", Layer: "one"}) {
		t.Error("a layer with a process's log: want true")
	}
}

// layers is a pool whose volumes are the directories under dir.
type layers struct {
	cowfs.Backend
	dir string
}

func (l layers) Get(_ context.Context, name string) (cowfs.Volume, error) {
	p := filepath.Join(l.dir, name)
	if _, err := os.Stat(p); err != nil {
		return cowfs.Volume{}, cowfs.ErrNotFound
	}
	return cowfs.Volume{Name: name, Path: p}, nil
}

// Sessions: a language it knows, a few per sandbox, found by their
// owner (or root) alone; an input over the bound, or holding a shell
// session's end marker, is refused and audited.
func TestUnitSessionsRefuse(t *testing.T) {
	c, h := newUnit(t)
	if _, err := c.OpenSession(ctx, "sb1", "perl", ExecOptions{UID: 1000}); !errors.Is(err, supervisor.ErrInvalid) ||
		!strings.Contains(err.Error(), "want one of python3, node, sh") {
		t.Errorf("a session of perl: %v; want ErrInvalid naming the languages", err)
	}
	c.sessions.m = map[string]*session{}
	for i := range maxSessions {
		x := testSession(newID(), 1000)
		x.sandbox, x.lang, x.token = "sb1", "sh", "tok"
		if i == 0 {
			x.id = "s0"
		}
		c.sessions.m["sb1/"+x.id] = x
	}
	if _, err := c.OpenSession(ctx, "sb1", "python3", ExecOptions{UID: 1000}); !errors.Is(err, supervisor.ErrLimitReached) {
		t.Errorf("a ninth session: %v; want ErrLimitReached", err)
	}
	if len(c.sessions.opening) != 0 {
		t.Errorf("sessions being opened after a refusal: %v", c.sessions.opening)
	}
	if h.requests != 0 {
		t.Errorf("refused sessions made %d requests", h.requests)
	}
	for _, tc := range []struct {
		what, id, sess string
		uid            uint32
		code           string
		want           error
	}{
		{"no such session", "sb1", "nosuch", 1000, "1", ErrNoSession},
		{"another sandbox's", "sb2", "s0", 1000, "1", ErrNoSession},
		{"another user's", "sb1", "s0", 1001, "1", ErrNoSession},
		{"an input too large", "sb1", "s0", 1000, strings.Repeat("x", MaxEvalInput+1), supervisor.ErrInvalid},
		{"root's, with the end marker", "sb1", "s0", 0, "echo\n__sandboxd_end_tok__\necho", supervisor.ErrInvalid},
	} {
		if _, _, err := c.Eval(ctx, tc.id, tc.sess, tc.uid, tc.code, EvalOptions{}); !errors.Is(err, tc.want) {
			t.Errorf("eval in %s: %v; want %v", tc.what, err, tc.want)
		}
	}
	evals := 0
	for _, a := range h.Audits() {
		if a.Entry.Action == "eval" {
			evals++
		}
	}
	if evals != 2 { // the sessions found; the others had no session to name
		t.Errorf("%d evals audited; want 2", evals)
	}
	if err := c.CloseSession(ctx, "sb1", "s0", 1001); !errors.Is(err, ErrNoSession) {
		t.Errorf("closing another user's session: %v; want ErrNoSession", err)
	}
	if err := c.SessionFull("sb1", "nosuch"); err != nil {
		t.Errorf("SessionFull of no session: %v", err)
	}
}

// The file API's bounds and checks, before the init is asked; each call
// audited with its action; the init's refusals named by the sentinels.
func TestUnitFilesRefuseBeforeTheInit(t *testing.T) {
	c, h := newUnit(t)
	h.AddSandbox(t, state.Record{ID: "stopped", State: state.Stopped})
	user := FileAccess{UID: 1000}
	if _, err := c.ReadFile(ctx, "sb1", user, "a", 0, MaxFileData+1); !errors.Is(err, supervisor.ErrInvalid) {
		t.Errorf("a read over MaxFileData: %v", err)
	}
	if err := c.WriteFile(ctx, "sb1", user, "a", make([]byte, MaxFileData+1), WriteOptions{}); !errors.Is(err, supervisor.ErrInvalid) {
		t.Errorf("a write over MaxFileData: %v", err)
	}
	if _, err := c.EditFile(ctx, "sb1", user, "a", "", "x"); !errors.Is(err, supervisor.ErrInvalid) {
		t.Errorf("an edit of nothing: %v", err)
	}
	if _, err := c.EditFile(ctx, "sb1", user, "a", strings.Repeat("x", nsinit.MaxEditText+1), "x"); !errors.Is(err, supervisor.ErrInvalid) {
		t.Errorf("an edit of too long a text: %v", err)
	}
	for _, p := range []string{"", "a\x00b", strings.Repeat("a", 4097)} {
		if _, err := c.ListFiles(ctx, "sb1", user, p, false, 0); !errors.Is(err, supervisor.ErrInvalid) {
			t.Errorf("listing path %.10q: %v; want ErrInvalid", p, err)
		}
	}
	if _, err := c.ReadFile(ctx, "stopped", user, "a", 0, 0); !errors.Is(err, supervisor.ErrWrongState) {
		t.Errorf("reading in a stopped sandbox: %v", err)
	}
	if err := h.Start(ctx, "sb1", 4242, false); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ReadFile(ctx, "sb1", FileAccess{UID: 1000, AsRoot: true}, "a", 0, 0); !errors.Is(err, supervisor.ErrNoIdmap) ||
		!strings.Contains(err.Error(), "zfs-fuse") {
		t.Errorf("reading as root for a user without a user namespace: %v; want ErrNoIdmap", err)
	}
	touched := h.Touches("sb1")
	if _, err := c.ReadFile(ctx, "sb1", user, "a", 0, 0); !errors.Is(err, nsinit.ErrNotRunning) {
		t.Errorf("reading with no init: %v; want ErrNotRunning", err)
	}
	if c.files.running("sb1") || h.Touches("sb1") <= touched {
		t.Error("a file call that ended is counted, or did not touch its sandbox")
	}
	var actions []string
	for _, a := range h.Audits() {
		actions = append(actions, a.Entry.Action)
	}
	want := []string{"read-file", "write-file", "edit-file", "edit-file", "list-files", "list-files", "list-files", "read-file", "read-file", "read-file"}
	if !slices.Equal(actions, want) {
		t.Errorf("audited %q; want %q", actions, want)
	}

	for _, tc := range []struct {
		o    WriteOptions
		want error
	}{
		{WriteOptions{Append: true, AtOffset: true}, supervisor.ErrInvalid},
		{WriteOptions{Mode: 0o4755, HasMode: true}, supervisor.ErrInvalid},
	} {
		if _, err := writeRequest("a", tc.o); !errors.Is(err, tc.want) {
			t.Errorf("write options %+v: %v; want %v", tc.o, err, tc.want)
		}
	}
	if req, err := writeRequest("a", WriteOptions{NoCreate: true}); err != nil || req.Mode != 0o644 || req.Create {
		t.Errorf("a write's defaults: %+v, %v; want mode 0644, no create", req, err)
	}
	for errno, want := range map[syscall.Errno]error{
		syscall.ENOENT: ErrNoFile, syscall.ENOTDIR: ErrNoFile, syscall.EACCES: supervisor.ErrAccessDenied,
		syscall.EPERM: supervisor.ErrAccessDenied, syscall.ELOOP: supervisor.ErrInvalid, 0: supervisor.ErrInvalid,
	} {
		err := fileError(&nsinit.FileError{Msg: "the init's words", Errno: errno})
		if !errors.Is(err, want) || err.Error() != "the init's words" {
			t.Errorf("errno %v: %v; want %v in the init's words", errno, err, want)
		}
	}
}

// System asks only a booted sandbox, and keeps of systemctl's answer
// what a state or a unit's name may hold.
func TestUnitSystem(t *testing.T) {
	c, _ := newUnit(t)
	if _, err := c.System(ctx, "sb1", 1000); !errors.Is(err, ErrNotBooted) {
		t.Errorf("the system of a sandbox not booted: %v; want ErrNotBooted", err)
	}
	if _, err := c.System(ctx, "nosuch", 1000); !errors.Is(err, supervisor.ErrNotFound) {
		t.Errorf("the system of no sandbox: %v; want ErrNotFound", err)
	}
	if got := clean(" foo@bar.service\x1b[31m;rm -rf /\n"); got != "foo@bar.service31mrm-rf" {
		t.Errorf("clean = %q", got)
	}
	if got := clean(strings.Repeat("a", 300)); len(got) != 256 {
		t.Errorf("clean kept %d bytes; want 256", len(got))
	}
}
