package ports

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/supervisor"
	"github.com/sandboxd/sandboxd/supervisor/hosttest"
	"github.com/sandboxd/sandboxd/supervisor/state"
)

// The room's logic against a fake Host, without root: the sockets are the
// test's own (its uid is the sandboxes' owner), and no connection is
// carried into a sandbox (that takes a network namespace: the testbed's
// TestPorts* do it). The names have Unit in them for `-run Unit`.

const sbID = "aaaaaaaaaaaa"

// newHost is a fake Host with sandbox sbID recorded, owned by the
// test's uid, exposing ports.
func newHost(t *testing.T, ports ...state.Port) *hosttest.Host {
	t.Helper()
	h := hosttest.New(t, nil, nil)
	h.AddSandbox(t, state.Record{ID: sbID, Project: "web", Owner: uint32(os.Getuid()),
		Unit: "sandbox-" + sbID + ".scope", Ports: ports})
	return h
}

// newUnit is a Ports over newHost's Host; its runtime directory is
// short, for the sockets' paths (107 bytes at most).
func newUnit(t *testing.T, ports ...state.Port) (*Ports, *hosttest.Host) {
	t.Helper()
	h := newHost(t, ports...)
	return New(h, Config{RuntimeDir: shortDir(t)}), h
}

func shortDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "pt")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func recordedPorts(t *testing.T, h *hosttest.Host) []state.Port {
	t.Helper()
	rec, err := h.S.Get(sbID)
	if err != nil {
		t.Fatal(err)
	}
	return rec.Ports
}

// listening says whether path is a socket someone listens on.
func listening(path string) bool {
	c, err := net.DialTimeout("unix", path, time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// Expose records the port, listens on the owner's socket (and a loopback
// TCP port if asked) and audits; Close forgets it, closes and removes it.
func TestUnitExposeRecordsListensAndCloseUndoes(t *testing.T) {
	p, h := newUnit(t)
	ctx := supervisor.WithCaller(context.Background(), uint32(os.Getuid()))
	if err := h.Start(ctx, sbID, os.Getpid(), false); err != nil {
		t.Fatal(err)
	}
	path, err := p.Expose(ctx, sbID, 8000, false)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(p.cfg.RuntimeDir, "ports", sbID+"-8000.sock"); path != want || !listening(path) {
		t.Fatalf("Expose = %q (listening: %v); want %q, listening", path, listening(path), want)
	}
	addr, err := p.Expose(ctx, sbID, 8001, true)
	if err != nil || !strings.HasPrefix(addr, "127.0.0.1:") {
		t.Fatalf("Expose with TCP = %q, %v; want 127.0.0.1:N", addr, err)
	}
	if got := recordedPorts(t, h); len(got) != 2 || got[0] != (state.Port{Port: 8000}) || got[1] != (state.Port{Port: 8001, TCP: true}) {
		t.Fatalf("recorded ports %v; want 8000 and 8001 tcp", got)
	}
	if err := p.Close(ctx, sbID, 8000); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(path); !os.IsNotExist(err) {
		t.Errorf("the socket after Close: %v; want it gone", err)
	}
	if got := recordedPorts(t, h); len(got) != 1 || got[0].Port != 8001 {
		t.Errorf("recorded ports after Close: %v; want 8001 alone", got)
	}
	var got []string
	for _, a := range h.Audits() {
		got = append(got, a.Entry.Action+" "+a.Entry.Command)
		if a.Err != nil {
			t.Errorf("audited %s: %v", a.Entry.Action, a.Err)
		}
	}
	if want := "port-expose port 8000,port-expose port 8001 tcp,port-close port 8000"; strings.Join(got, ",") != want {
		t.Errorf("audited %q; want %q", strings.Join(got, ","), want)
	}
}

// Expose refuses what is not a port, a sandbox whose init does not run,
// a port exposed already (saying where) and past Max, each with the
// core's sentinel; Close refuses a port not exposed. Each refusal is
// audited, and nothing is recorded.
func TestUnitExposeRefusesWithTheCoresSentinels(t *testing.T) {
	p, h := newUnit(t)
	ctx := supervisor.WithCaller(context.Background(), uint32(os.Getuid()))
	if _, err := p.Expose(ctx, sbID, 8000, false); !errors.Is(err, supervisor.ErrWrongState) {
		t.Errorf("Expose with no init: %v; want ErrWrongState", err)
	}
	if err := h.Start(ctx, sbID, os.Getpid(), false); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Expose(ctx, sbID, 0, false); !errors.Is(err, supervisor.ErrInvalid) {
		t.Errorf("Expose of port 0: %v; want ErrInvalid", err)
	}
	if err := p.Close(ctx, sbID, 8000); !errors.Is(err, supervisor.ErrInvalid) {
		t.Errorf("Close of a port not exposed: %v; want ErrInvalid", err)
	}
	if _, err := p.Expose(ctx, "bbbbbbbbbbbb", 8000, false); err == nil {
		t.Error("Expose of no sandbox: no error")
	}
	if got := recordedPorts(t, h); len(got) != 0 {
		t.Fatalf("recorded ports after refusals: %v", got)
	}
	addr, err := p.Expose(ctx, sbID, 8000, true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Expose(ctx, sbID, 8000, false); !errors.Is(err, supervisor.ErrExists) || !strings.Contains(err.Error(), addr) {
		t.Errorf("Expose of a port exposed at %s: %v; want ErrExists naming where", addr, err)
	}
	for port := uint16(8001); port < 8000+Max; port++ {
		if _, err := p.Expose(ctx, sbID, port, false); err != nil {
			t.Fatalf("port %d of %d: %v", port-8000+1, Max, err)
		}
	}
	if _, err := p.Expose(ctx, sbID, 9000, false); !errors.Is(err, supervisor.ErrLimitReached) {
		t.Errorf("Expose past %d ports: %v; want ErrLimitReached", Max, err)
	}
	if got := recordedPorts(t, h); len(got) != Max {
		t.Errorf("%d ports recorded; want %d", len(got), Max)
	}
	refused := 0
	for _, a := range h.Audits() {
		if a.Err != nil {
			refused++
		}
	}
	if refused != 5 {
		t.Errorf("%d refusals audited; want 5 (no sandbox: none)", refused)
	}
}

// A port that cannot be listened on is not recorded: the record first
// took it, and forgets it.
func TestUnitExposeThatFailsForgetsThePort(t *testing.T) {
	p, h := newUnit(t)
	ctx := supervisor.WithCaller(context.Background(), uint32(os.Getuid()))
	if err := h.Start(ctx, sbID, os.Getpid(), false); err != nil {
		t.Fatal(err)
	}
	// A file where the sockets' directory goes.
	if err := os.WriteFile(filepath.Join(p.cfg.RuntimeDir, "ports"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Expose(ctx, sbID, 8000, false); err == nil {
		t.Fatal("Expose with no directory for its socket: no error")
	}
	if got := recordedPorts(t, h); len(got) != 0 {
		t.Errorf("recorded ports after a failed Expose: %v; want none", got)
	}
}

// Started exposes again the ports a record keeps (once, however often it
// runs); Close closes them all and the record keeps them; Destroying
// closes a sandbox's and removes a socket a crash left of a recorded
// port.
func TestUnitHooksRestoreCloseAndDestroy(t *testing.T) {
	p, h := newUnit(t, state.Port{Port: 8000}, state.Port{Port: 8001, TCP: true})
	ctx := context.Background()
	if err := h.Start(ctx, sbID, os.Getpid(), true); err != nil {
		t.Fatal(err)
	}
	sock := func(port uint16) string { return filepath.Join(p.dir, portSocketName(sbID, port)) }
	e := p.t.get(portKey{sbID, 8001})
	if !listening(sock(8000)) || !listening(sock(8001)) || e == nil || e.tcpAddr == "" {
		t.Fatal("the record's ports were not exposed again at the start")
	}
	// A rollback starts another init: the ports stay as they are.
	if err := h.Start(ctx, sbID, os.Getpid(), false); err != nil {
		t.Fatal(err)
	}
	if again := p.t.get(portKey{sbID, 8001}); again != e {
		t.Error("a second start exposed a served port anew")
	}
	h.Close()
	if listening(sock(8000)) || listening(sock(8001)) || len(p.t.take(func(portKey) bool { return true })) != 0 {
		t.Error("ports still served after Close")
	}
	if got := recordedPorts(t, h); len(got) != 2 {
		t.Errorf("recorded ports after Close: %v; want both kept", got)
	}
	// Started again, then a socket a crash left of a third recorded port.
	if _, err := h.S.Update(sbID, func(r *state.Record) error { r.Ports = append(r.Ports, state.Port{Port: 8002}); return nil }); err != nil {
		t.Fatal(err)
	}
	if err := h.Start(ctx, sbID, os.Getpid(), false); err != nil {
		t.Fatal(err)
	}
	p.closePort(p.t.take(func(k portKey) bool { return k.port == 8002 })[0])
	ln, err := net.Listen("unix", sock(8002))
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
	if err := h.Destroy(ctx, sbID); err != nil {
		t.Fatal(err)
	}
	for _, port := range []uint16{8000, 8001, 8002} {
		if _, err := os.Lstat(sock(port)); !os.IsNotExist(err) {
			t.Errorf("port %d's socket after the sandbox's destroy: %v; want it gone", port, err)
		}
	}
	if p.t.get(portKey{sbID, 8000}) != nil {
		t.Error("a destroyed sandbox's port still in the table")
	}
}

// wakeGate is a Host whose Wake waits for release: a connection stays
// under way until the test lets it on.
type wakeGate struct {
	*hosttest.Host
	woke    chan string
	release chan struct{}
}

func (w *wakeGate) Wake(ctx context.Context, id string) error {
	w.woke <- id
	select {
	case <-w.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	return w.Host.Wake(ctx, id)
}

// A connection under way makes the sandbox busy (Busy), until it ends; a
// port takes MaxConns at once and closes the next at once; a port closed
// ends its connections, however far they got.
func TestUnitConnectionsMakeBusyAndStopAtMaxConns(t *testing.T) {
	fh := newHost(t)
	h := &wakeGate{Host: fh, woke: make(chan string, MaxConns+1), release: make(chan struct{})}
	p := New(h, Config{RuntimeDir: shortDir(t)})
	ctx := supervisor.WithCaller(context.Background(), uint32(os.Getuid()))
	if err := fh.Start(ctx, sbID, os.Getpid(), false); err != nil {
		t.Fatal(err)
	}
	path, err := p.Expose(ctx, sbID, 8000, false)
	if err != nil {
		t.Fatal(err)
	}
	if fh.Busy(ctx, sbID) {
		t.Fatal("busy with no connection")
	}
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range MaxConns {
		c, err := net.Dial("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		select {
		case <-h.woke:
		case <-time.After(5 * time.Second):
			t.Fatalf("connection %d never reached the sandbox's wake", len(conns))
		}
	}
	if !fh.Busy(ctx, sbID) || fh.Busy(ctx, "bbbbbbbbbbbb") {
		t.Fatal("Busy does not say which sandbox a connection is under way to")
	}
	over, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer over.Close()
	over.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := over.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("connection %d: read %v; want it closed (EOF)", MaxConns+1, err)
	}
	// Let one on: with no init in the sandbox's scope (the test's pid is
	// not in it) it ends, and frees its place.
	h.release <- struct{}{}
	deadline := time.Now().Add(5 * time.Second)
	for len(p.t.get(portKey{sbID, 8000}).slots) != MaxConns-1 {
		if time.Now().After(deadline) {
			t.Fatal("a connection that ended kept its place")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if fh.Touches(sbID) != 2 { // its wake and the touch as it ended
		t.Errorf("the sandbox was woken or touched %d times; want 2", fh.Touches(sbID))
	}
	// Close ends the rest, waiting in their wake.
	if err := p.Close(ctx, sbID, 8000); err != nil {
		t.Fatal(err)
	}
	if fh.Busy(ctx, sbID) {
		t.Error("busy after its port closed")
	}
}

// splice carries bytes both ways and passes each way's end on as a half
// close; a connection idle both ways is closed.
func TestUnitSpliceCarriesBothWaysAndEndsIdle(t *testing.T) {
	pair := func() (net.Conn, net.Conn) {
		ln, err := net.Listen("unix", filepath.Join(shortDir(t), "s"))
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		c, err := net.Dial("unix", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		s, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		return c, s
	}
	client, a := pair()
	b, server := pair()
	done := make(chan struct{})
	go func() { defer close(done); splice(a, b, time.Minute) }()
	if _, err := client.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	client.(*net.UnixConn).CloseWrite()
	got, err := io.ReadAll(server) // ends with the client's half close
	if err != nil || string(got) != "ping" {
		t.Fatalf("the server read %q, %v; want ping, then the end", got, err)
	}
	if _, err := server.Write([]byte("pong")); err != nil {
		t.Fatal(err)
	}
	server.Close()
	got, err = io.ReadAll(client)
	if err != nil || string(got) != "pong" {
		t.Fatalf("the client read %q, %v; want pong, then the end", got, err)
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("splice did not end with both ways ended")
	}
	client.Close()

	client, a = pair()
	b, server = pair()
	defer client.Close()
	defer server.Close()
	start := time.Now()
	splice(a, b, 200*time.Millisecond)
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("an idle splice ended after %v", d)
	}
	client.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := client.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("the client of an idle splice read %v; want it closed", err)
	}
}

// The refusals' log lets 10 lines a minute through and counts the rest
// for the next.
func TestUnitRefusalLinesBudgeted(t *testing.T) {
	var l lineCount
	for i := range 10 {
		if held, ok := l.allow(); !ok || held != 0 {
			t.Fatalf("line %d: %d, %v; want let through", i+1, held, ok)
		}
	}
	for range 3 {
		if _, ok := l.allow(); ok {
			t.Fatal("an 11th line in a minute let through")
		}
	}
	l.start = l.start.Add(-time.Minute)
	if held, ok := l.allow(); !ok || held != 3 {
		t.Errorf("the next minute's first line: %d held, %v; want 3, let through", held, ok)
	}
}
