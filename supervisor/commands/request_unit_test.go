package commands

// A command's request without root: who runs it, where and with what
// environment, in the order the init is given it.

import (
	"context"
	"errors"
	"os/user"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/runtime/nsinit"
	"github.com/sandboxd/sandboxd/supervisor"
	"github.com/sandboxd/sandboxd/supervisor/state"
)

// nobodyUID is a uid with no account here: its name is its number, its
// home / and its shell /bin/sh.
const nobodyUID = 4242424

func noAccount(t *testing.T) {
	t.Helper()
	if _, err := user.LookupId(strconv.Itoa(nobodyUID)); err == nil {
		t.Skipf("uid %d has an account here", nobodyUID)
	}
}

// The environment: the base, TERM for a PTY, the proxy for an allowlist,
// the rooms' CommandEnv in their order, then the project's over those
// and the caller's over all (a key replaced where it stands).
func TestUnitRequestEnvironment(t *testing.T) {
	noAccount(t)
	c, h := newUnit(t)
	h.Hooks().CommandEnv.Add(func(rec state.Record) []string { return []string{"CACHE=" + rec.ID} })
	h.Hooks().CommandEnv.Add(func(state.Record) []string { return []string{"SECOND=2"} })
	rec := state.Record{ID: "sb1", Project: "web", Network: nsinit.NetworkAllowlist,
		Env: []string{"FOO=project", "SHELL=/bin/bash", "CACHE=project"}}
	req, err := c.request(ctx, rec, ExecOptions{Argv: []string{"true"}, UID: nobodyUID, PTY: true,
		Env: []string{"FOO=caller", "BAR=b"}})
	if err != nil {
		t.Fatal(err)
	}
	proxy := "http://" + supervisor.ProxyAddr
	want := []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=/", "USER=4242424", "LOGNAME=4242424", "SHELL=/bin/bash",
		"SANDBOX_ID=sb1",
		"TERM=xterm-256color",
		"http_proxy=" + proxy, "https_proxy=" + proxy, "HTTP_PROXY=" + proxy, "HTTPS_PROXY=" + proxy,
		"no_proxy=localhost,127.0.0.1,::1", "NO_PROXY=localhost,127.0.0.1,::1",
		"CACHE=project", "SECOND=2",
		"FOO=caller", "BAR=b",
	}
	if !slices.Equal(req.Env, want) {
		t.Errorf("env:\n got %q\nwant %q", req.Env, want)
	}
	if req.Home != "/" || req.UID != nobodyUID || req.GID != nobodyUID || req.Dir != "/project" || !req.PTY {
		t.Errorf("request %+v; want home /, uid and gid %d, dir /project, a PTY", req, nobodyUID)
	}

	// No PTY, no allowlist: neither TERM nor a proxy (the rooms' still).
	req, err = c.request(ctx, state.Record{ID: "sb1", Network: nsinit.NetworkHost}, ExecOptions{UID: nobodyUID})
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range req.Env {
		if strings.HasPrefix(kv, "TERM=") || strings.Contains(strings.ToLower(kv), "proxy") {
			t.Errorf("env has %q", kv)
		}
	}
	if len(req.Env) != 8 || req.Env[5] != "SANDBOX_ID=sb1" || req.Env[6] != "CACHE=sb1" || req.Env[7] != "SECOND=2" {
		t.Errorf("env %q; want the base and the rooms'", req.Env)
	}
}

// Where a command runs: its own directory, else where the sandbox sees
// its project (the path it was adopted from, else its volume's); the
// pool's error is the request's.
func TestUnitRequestDir(t *testing.T) {
	c, h := newUnit(t)
	o := ExecOptions{UID: nobodyUID}
	rec := state.Record{ID: "sb1", Project: "web"}
	if req, err := c.request(ctx, rec, ExecOptions{UID: nobodyUID, Dir: "/tmp"}); err != nil || req.Dir != "/tmp" || h.requests != 0 {
		t.Errorf("a command's own dir: %q, %v (pool asked %d times); want /tmp, the pool not asked", req.Dir, err, h.requests)
	}
	if req, err := c.request(ctx, rec, o); err != nil || req.Dir != "/project" {
		t.Errorf("a project's volume: %q, %v; want /project", req.Dir, err)
	}
	h.AddProject(supervisor.Project{Name: "web", Location: "/srv/web", At: []string{"/home/u/web", "/other"}})
	if req, err := c.request(ctx, rec, o); err != nil || req.Dir != "/home/u/web" {
		t.Errorf("an adopted project: %q, %v; want /home/u/web", req.Dir, err)
	}
	// A relative one starts at the project's.
	if req, err := c.request(ctx, rec, ExecOptions{UID: nobodyUID, Dir: "sub/x"}); err != nil || req.Dir != "/home/u/web/sub/x" {
		t.Errorf("a relative dir: %q, %v; want /home/u/web/sub/x", req.Dir, err)
	}
	boom := errors.New("no such project volume")
	h.B = failingPool{err: boom}
	if _, err := c.request(ctx, rec, o); !errors.Is(err, boom) {
		t.Errorf("a pool that fails: %v; want its error", err)
	}
}

type failingPool struct {
	cowfs.Backend
	err error
}

func (p failingPool) Project(context.Context, string) (cowfs.Volume, error) {
	return cowfs.Volume{}, p.err
}

// Who runs it: root is asked for, never implied; a user with no id in
// the sandbox's user namespace is refused as invalid, naming the uid; a
// group with none becomes nobody's.
func TestUnitRequestIdentity(t *testing.T) {
	noAccount(t)
	c, _ := newUnit(t)
	rec := state.Record{ID: "sb1", Project: "web"}
	req, err := c.request(ctx, rec, ExecOptions{UID: 0})
	if err != nil || req.UID != 0 || !req.NoCapabilities {
		t.Errorf("root's plain command: uid %d, no capabilities %v, %v; want uid 0 without capabilities", req.UID, req.NoCapabilities, err)
	}
	req, err = c.request(ctx, rec, ExecOptions{UID: 1000, AsRoot: true})
	if err != nil || req.UID != 0 || req.NoCapabilities {
		t.Errorf("as root: uid %d, no capabilities %v, %v; want uid 0 with them", req.UID, req.NoCapabilities, err)
	}

	ids := &state.IDMap{Base: 1 << 20,
		UIDs: []state.IDExtent{{Inside: 0, Host: 1 << 20, Count: 1000}},
		GIDs: []state.IDExtent{{Inside: 0, Host: 1 << 20, Count: 1000}}}
	rec = state.Record{ID: "sb1", Project: "web", Owner: 1000, IDs: ids}
	_, err = c.request(ctx, rec, ExecOptions{UID: nobodyUID})
	if !errors.Is(err, supervisor.ErrInvalid) || !strings.Contains(err.Error(), "uid 4242424 has no id in sandbox sb1") {
		t.Errorf("a uid the namespace does not map: %v; want ErrInvalid naming it", err)
	}
	ids.UIDs = append(ids.UIDs, state.IDExtent{Inside: nobodyUID, Host: 1<<20 + nobodyUID, Count: 1})
	req, err = c.request(ctx, rec, ExecOptions{UID: nobodyUID})
	if err != nil || req.GID != 65534 {
		t.Errorf("a mapped uid whose group is not: gid %d, %v; want 65534", req.GID, err)
	}
}
