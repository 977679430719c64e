package supervisor

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/user"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/sandboxd/sandboxd/runtime/nsinit"
	"github.com/sandboxd/sandboxd/supervisor/audit"
	"github.com/sandboxd/sandboxd/supervisor/state"
	"github.com/sandboxd/sandboxd/units"
)

// ErrNoCommand: no running command with that id in that sandbox.
var ErrNoCommand = errors.New("no such command")

// Command is a command running in a sandbox.
type Command struct {
	ID      string
	Sandbox string
	// Master is the terminal's master of a PTY command; the caller owns it.
	Master *os.File

	cmd  *nsinit.Command
	done chan struct{}
	res  nsinit.Result
}

// Done is closed once the command has ended.
func (c *Command) Done() <-chan struct{} { return c.done }

// Result is how the command ended; it waits for that.
func (c *Command) Result() nsinit.Result {
	<-c.done
	return c.res
}

// commands are the commands running now, by sandbox and command id.
type commands struct {
	mu sync.Mutex
	m  map[string]*Command // "sandbox/command"
}

func (c *commands) add(cmd *Command) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]*Command{}
	}
	c.m[cmd.Sandbox+"/"+cmd.ID] = cmd
}

func (c *commands) remove(cmd *Command) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, cmd.Sandbox+"/"+cmd.ID)
}

func (c *commands) get(sandbox, id string) *Command {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[sandbox+"/"+id]
}

// Exec starts a command in sandbox id, as the caller, and returns once it
// runs; its output goes straight to the caller's files. Command.Done
// tells when it ends, and Result how: a kill by the sandbox's memory limit
// is told apart from other kills.
func (s *Supervisor) Exec(ctx context.Context, id string, o ExecOptions) (_ *Command, err error) {
	timing := newSteps()
	if err := s.wake(ctx, id); err != nil {
		return nil, err
	}
	rec, err := s.cfg.Store.Get(id)
	if err != nil {
		return nil, err
	}
	timing.mark("record")
	defer func() {
		s.auditEntry(ctx, audit.Entry{Action: "exec", Command: strings.Join(o.Argv, " ")}, rec, err)
	}()
	if !o.PTY && len(o.Stdio) != 3 {
		return nil, fmt.Errorf("running a command in sandbox %s: want stdin, stdout and stderr: %w", id, ErrInvalid)
	}
	req, err := s.commandRequest(ctx, rec, o, "running a command")
	if err != nil {
		return nil, err
	}
	timing.mark("request")
	w := s.worlds.get(id)
	var oomBefore uint64
	if w != nil {
		oomBefore, _ = units.OOMKills(w.pid)
	}
	cmdID := newCommandID()
	files := o.Stdio
	var cg *nsinit.CommandCgroup
	if w != nil && !o.Detach {
		if cg, err = nsinit.NewCommandCgroup(w.pid, cmdID); err != nil {
			s.log.Warn("the command runs without a cgroup of its own: what it leaves running outside its process group outlives it",
				"SANDBOX_ID", id, "error", err)
		} else {
			req.Cgroup = true
			files = append(slices.Clone(o.Stdio), cg.Files()...)
		}
	}
	timing.mark("cgroup")
	nc, err := nsinit.Exec(ctx, nsinit.Control(s.runtimeDir(id)), req, files)
	if err != nil && cg != nil && strings.Contains(err.Error(), "expected 3 file descriptors") {
		// An init started by an older daemon knows no command cgroups.
		_ = cg.Remove()
		cg, req.Cgroup = nil, false
		nc, err = nsinit.Exec(ctx, nsinit.Control(s.runtimeDir(id)), req, o.Stdio)
	}
	if err != nil {
		if cg != nil {
			_ = cg.Remove()
		}
		return nil, fmt.Errorf("running a command in sandbox %s: %w", id, err)
	}
	if cg != nil {
		cg.CloseFiles() // the init has its own copies
	}
	timing.mark("init")
	cmd := &Command{ID: cmdID, Sandbox: id, Master: nc.Master, cmd: nc, done: make(chan struct{})}
	s.commands.add(cmd)
	s.log.Info("command started", "SANDBOX_ID", id, "ACTION", "exec", "CALLER_UID", o.UID,
		"command", cmd.ID, "argv", strings.Join(o.Argv, " "), "as_root", o.AsRoot, "steps", timing.String())
	go func() {
		res := nc.Result()
		// A SIGKILL while the cgroup's OOM kills went up is the memory
		// limit's, also when it hit a child and the command (a shell)
		// reports it as status 137.
		killed := res.How == nsinit.Signaled && res.Signal == int(syscall.SIGKILL) ||
			res.How == nsinit.Exited && res.Code == 128+int(syscall.SIGKILL)
		if killed && w != nil {
			if after, err := units.OOMKills(w.pid); err == nil && after > oomBefore {
				res = nsinit.Result{How: nsinit.OOMKilled, Signal: int(syscall.SIGKILL)}
			}
		}
		cmd.res = res
		if cg != nil && res.How != nsinit.Lost {
			if err := cg.Remove(); err != nil {
				s.log.Warn("removing a command's cgroup", "SANDBOX_ID", id, "command", cmdID, "error", err)
			}
		}
		s.commands.remove(cmd)
		s.touch(id)
		s.log.Info("command ended", "SANDBOX_ID", id, "ACTION", "exec", "command", cmd.ID, "result", res.String())
		close(cmd.done)
	}()
	return cmd, nil
}

// Signal sends sig to a running command's process group.
func (s *Supervisor) Signal(ctx context.Context, sandbox, command string, sig syscall.Signal) error {
	c := s.commands.get(sandbox, command)
	if c == nil {
		return fmt.Errorf("signalling command %s of sandbox %s: %w", command, sandbox, ErrNoCommand)
	}
	return c.cmd.Signal(sig)
}

// Command returns a running command, for its caller's checks.
func (s *Supervisor) Command(sandbox, command string) (*Command, bool) {
	c := s.commands.get(sandbox, command)
	return c, c != nil
}

// commandRequest checks that sandbox rec may run o's command (what,
// "running a command", names the call in errors) and makes its request.
func (s *Supervisor) commandRequest(ctx context.Context, rec state.Record, o ExecOptions, what string) (nsinit.Request, error) {
	if !rec.Runs() {
		return nsinit.Request{}, fmt.Errorf("%s in sandbox %s: it is %s: %w", what, rec.ID, rec.State, ErrWrongState)
	}
	if len(o.Argv) == 0 || o.Argv[0] == "" {
		return nsinit.Request{}, fmt.Errorf("%s in sandbox %s: no command given: %w", what, rec.ID, ErrInvalid)
	}
	if o.AsRoot && o.UID != 0 && rec.IDs == nil {
		// Root there would be the host's.
		return nsinit.Request{}, fmt.Errorf("%s in sandbox %s as root: %w, so only root may (%v)", what, rec.ID, ErrNoIdmap, s.userns.unavailable)
	}
	req, err := s.request(ctx, rec, o)
	if err != nil {
		return req, fmt.Errorf("%s in sandbox %s: %w", what, rec.ID, err)
	}
	return req, nil
}

// request is the init's request for o: the caller's identity, home and
// environment.
func (s *Supervisor) request(ctx context.Context, rec state.Record, o ExecOptions) (nsinit.Request, error) {
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
	if req.Dir == "" {
		project, err := s.cfg.Backend.Project(ctx, s.projects.location(rec.Project))
		if err != nil {
			return req, err
		}
		req.Dir = s.seenAt(rec.Project, project)
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
		proxy := "http://" + ProxyAddr
		for _, k := range []string{"http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"} {
			req.Env = append(req.Env, k+"="+proxy)
		}
		req.Env = append(req.Env, "no_proxy=localhost,127.0.0.1,::1", "NO_PROXY=localhost,127.0.0.1,::1")
	}
	for _, f := range s.hooks.CommandEnv.each() {
		req.Env = append(req.Env, f(rec)...)
	}
	// The project's environment, as read when the sandbox was made, over
	// the base; the caller's own over both.
	req.Env = mergeEnv(mergeEnv(req.Env, rec.Env), o.Env)
	if err := execIdentity(rec, &req); err != nil {
		return req, err
	}
	return req, nil
}

// mergeEnv is base with each of over's KEY=value in place of base's.
func mergeEnv(base, over []string) []string {
	out := slices.Clone(base)
	for _, kv := range over {
		key, _, _ := strings.Cut(kv, "=")
		i := slices.IndexFunc(out, func(e string) bool { return strings.HasPrefix(e, key+"=") })
		if i >= 0 {
			out[i] = kv
		} else {
			out = append(out, kv)
		}
	}
	return out
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

func newCommandID() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
