package commands

// A command's request to the init: who runs it, where, and with what
// environment, built from the sandbox's record, the core's projects and
// the rooms' CommandEnv hooks.

import (
	"context"
	"fmt"
	"os"
	"os/user"
	"strconv"
	"strings"

	"github.com/sandboxd/sandboxd/runtime/nsinit"
	"github.com/sandboxd/sandboxd/supervisor"
	"github.com/sandboxd/sandboxd/supervisor/idmap"
	"github.com/sandboxd/sandboxd/supervisor/projects"
	"github.com/sandboxd/sandboxd/supervisor/state"
)

// request is the init's request for command o in sandbox rec: who runs
// it (o's caller: user, groups, home, shell), where (o.Dir, or where the
// sandbox sees its project) and its environment (the base, the rooms'
// CommandEnv, the project's, o.Env), its user checked against rec's
// user namespace.
func (c *Commands) request(ctx context.Context, rec state.Record, o ExecOptions) (nsinit.Request, error) {
	uid := o.UID
	if o.AsRoot {
		uid = 0
	}
	req := nsinit.Request{
		Argv: o.Argv, Dir: o.Dir, UID: uid, GID: uid,
		PTY: o.PTY, Rows: o.Rows, Cols: o.Cols, Timeout: o.Timeout, OutputLimit: o.OutputLimit,
		// Root is asked for, never implied: a root caller's plain command
		// is uid 0 with no capability (no DAC override, no chown).
		NoCapabilities: uid == 0 && !o.AsRoot,
	}
	name, home, shell := strconv.FormatUint(uint64(uid), 10), "/", "/bin/sh"
	if u, err := user.LookupId(name); err == nil {
		name, home = u.Username, u.HomeDir
		if gid, err := strconv.ParseUint(u.Gid, 10, 32); err == nil {
			req.GID = uint32(gid)
		}
		if gids, err := u.GroupIds(); err == nil {
			for _, g := range gids {
				if n, err := strconv.ParseUint(g, 10, 32); err == nil && uint32(n) != req.GID {
					req.Groups = append(req.Groups, uint32(n))
				}
			}
		}
		shell = loginShell(name, shell)
	}
	if home == "" || home == "/nonexistent" {
		home = "/"
	} else {
		req.Home = home
	}
	if !strings.HasPrefix(req.Dir, "/") {
		// None: the project's directory; a relative one starts there, as
		// a file call's relative path does (not cleaned: "link/.." is
		// the kernel's to resolve, in the sandbox, as the caller).
		dir, err := c.projectDir(ctx, rec.Project)
		if err != nil {
			return req, err
		}
		if req.Dir != "" {
			dir = strings.TrimSuffix(dir, "/") + "/" + req.Dir
		}
		req.Dir = dir
	}
	req.Env = []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=" + home, "USER=" + name, "LOGNAME=" + name, "SHELL=" + shell,
		"SANDBOX_ID=" + rec.ID,
	}
	if o.PTY {
		req.Env = append(req.Env, "TERM=xterm-256color")
	}
	if rec.Network == nsinit.NetworkAllowlist {
		proxy := "http://" + supervisor.ProxyAddr
		for _, k := range []string{"http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"} {
			req.Env = append(req.Env, k+"="+proxy)
		}
		req.Env = append(req.Env, "no_proxy=localhost,127.0.0.1,::1", "NO_PROXY=localhost,127.0.0.1,::1")
	}
	for _, f := range c.h.Hooks().CommandEnv.Funcs() {
		req.Env = append(req.Env, f(rec)...)
	}
	// The project's environment, as read when the sandbox was made, over
	// the base; the caller's own over both.
	req.Env = projects.MergeEnv(projects.MergeEnv(req.Env, rec.Env), o.Env)
	if err := idmap.ExecIdentity(rec, &req); err != nil {
		return req, fmt.Errorf("%w: %w", err, supervisor.ErrInvalid)
	}
	return req, nil
}

// projectDir is where a sandbox of project name sees it: where the
// project was adopted from (its first path), else its volume's path (as
// the registry's SeenAt).
func (c *Commands) projectDir(ctx context.Context, name string) (string, error) {
	p, _ := c.h.Project(name)
	project, err := c.h.Backend().Project(ctx, p.Location)
	if err != nil {
		return "", err
	}
	if len(p.At) > 0 {
		return p.At[0], nil
	}
	return project.Path, nil
}

// loginShell is name's shell from /etc/passwd (os/user does not read it).
func loginShell(name, fallback string) string {
	b, err := os.ReadFile("/etc/passwd")
	if err != nil {
		return fallback
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		f := strings.Split(line, ":")
		if len(f) == 7 && f[0] == name && f[6] != "" {
			return f[6]
		}
	}
	return fallback
}
