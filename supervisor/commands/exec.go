package commands

import (
	"context"
	"errors"
	"fmt"
	"github.com/sandboxd/sandboxd/internal/steps"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"

	"github.com/sandboxd/sandboxd/runtime/nsinit"
	"github.com/sandboxd/sandboxd/supervisor"
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

// table is the commands running now, by sandbox and command id.
type table struct {
	mu sync.Mutex
	m  map[string]*Command // "sandbox/command"
}

func (c *table) add(cmd *Command) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]*Command{}
	}
	c.m[cmd.Sandbox+"/"+cmd.ID] = cmd
}

func (c *table) remove(cmd *Command) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, cmd.Sandbox+"/"+cmd.ID)
}

func (c *table) get(sandbox, id string) *Command {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[sandbox+"/"+id]
}

// Exec starts a command in sandbox id, as the caller, and returns once it
// runs; its output goes straight to the caller's files. Command.Done
// tells when it ends, and Result how: a kill by the sandbox's memory limit
// is told apart from other kills.
func (c *Commands) Exec(ctx context.Context, id string, o ExecOptions) (_ *Command, err error) {
	timing := steps.New()
	if err := c.h.Wake(ctx, id); err != nil {
		return nil, err
	}
	rec, err := c.h.Store().Get(id)
	if err != nil {
		return nil, err
	}
	timing.Mark("record")
	defer func() {
		c.h.AuditEntry(ctx, audit.Entry{Action: "exec", Command: strings.Join(o.Argv, " ")}, rec, err)
	}()
	if !o.PTY && len(o.Stdio) != 3 {
		return nil, fmt.Errorf("running a command in sandbox %s: want stdin, stdout and stderr: %w", id, supervisor.ErrInvalid)
	}
	req, err := c.commandRequest(ctx, rec, o, "running a command")
	if err != nil {
		return nil, err
	}
	timing.Mark("request")
	pid, runs := c.h.InitPID(id)
	var oomBefore uint64
	if runs {
		oomBefore, _ = units.OOMKills(pid)
	}
	cmdID := newID()
	files := o.Stdio
	var cg *nsinit.CommandCgroup
	if runs && !o.Detach {
		if cg, err = nsinit.NewCommandCgroup(pid, cmdID); err != nil {
			c.log.Warn("the command runs without a cgroup of its own: what it leaves running outside its process group outlives it",
				"SANDBOX_ID", id, "error", err)
		} else {
			req.Cgroup = true
			files = append(slices.Clone(o.Stdio), cg.Files()...)
		}
	}
	timing.Mark("cgroup")
	nc, err := nsinit.Exec(ctx, nsinit.Control(c.h.RuntimeDir(id)), req, files)
	if err != nil && cg != nil && strings.Contains(err.Error(), "expected 3 file descriptors") {
		// An init started by an older daemon knows no command cgroups.
		_ = cg.Remove()
		cg, req.Cgroup = nil, false
		nc, err = nsinit.Exec(ctx, nsinit.Control(c.h.RuntimeDir(id)), req, o.Stdio)
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
	timing.Mark("init")
	cmd := &Command{ID: cmdID, Sandbox: id, Master: nc.Master, cmd: nc, done: make(chan struct{})}
	c.cmds.add(cmd)
	c.log.Info("command started", "SANDBOX_ID", id, "ACTION", "exec", "CALLER_UID", o.UID,
		"command", cmd.ID, "argv", strings.Join(o.Argv, " "), "as_root", o.AsRoot, "steps", timing.String())
	go func() {
		res := nc.Result()
		// A SIGKILL while the cgroup's OOM kills went up is the memory
		// limit's, also when it hit a child and the command (a shell)
		// reports it as status 137.
		killed := res.How == nsinit.Signaled && res.Signal == int(syscall.SIGKILL) ||
			res.How == nsinit.Exited && res.Code == 128+int(syscall.SIGKILL)
		if killed && runs {
			if after, err := units.OOMKills(pid); err == nil && after > oomBefore {
				res = nsinit.Result{How: nsinit.OOMKilled, Signal: int(syscall.SIGKILL)}
			}
		}
		cmd.res = res
		if cg != nil && res.How != nsinit.Lost {
			if err := cg.Remove(); err != nil {
				c.log.Warn("removing a command's cgroup", "SANDBOX_ID", id, "command", cmdID, "error", err)
			}
		}
		c.cmds.remove(cmd)
		c.h.Touch(id)
		c.log.Info("command ended", "SANDBOX_ID", id, "ACTION", "exec", "command", cmd.ID, "result", res.String())
		close(cmd.done)
	}()
	return cmd, nil
}

// Signal sends sig to a running command's process group.
func (c *Commands) Signal(ctx context.Context, sandbox, command string, sig syscall.Signal) error {
	cmd := c.cmds.get(sandbox, command)
	if cmd == nil {
		return fmt.Errorf("signalling command %s of sandbox %s: %w", command, sandbox, ErrNoCommand)
	}
	return cmd.cmd.Signal(sig)
}

// Command returns a running command, for its caller's checks.
func (c *Commands) Command(sandbox, command string) (*Command, bool) {
	cmd := c.cmds.get(sandbox, command)
	return cmd, cmd != nil
}

// commandRequest checks that sandbox rec may run o's command (what,
// "running a command", names the call in errors) and makes its request.
func (c *Commands) commandRequest(ctx context.Context, rec state.Record, o ExecOptions, what string) (nsinit.Request, error) {
	if !rec.Runs() {
		return nsinit.Request{}, fmt.Errorf("%s in sandbox %s: it is %s: %w", what, rec.ID, rec.State, supervisor.ErrWrongState)
	}
	if len(o.Argv) == 0 || o.Argv[0] == "" {
		return nsinit.Request{}, fmt.Errorf("%s in sandbox %s: no command given: %w", what, rec.ID, supervisor.ErrInvalid)
	}
	if o.AsRoot && o.UID != 0 && rec.IDs == nil {
		// Root there would be the host's.
		return nsinit.Request{}, fmt.Errorf("%s in sandbox %s as root: %w, so only root may (%v)", what, rec.ID, supervisor.ErrNoIdmap, c.h.UserNSUnavailable())
	}
	req, err := c.request(ctx, rec, o)
	if err != nil {
		return req, fmt.Errorf("%s in sandbox %s: %w", what, rec.ID, err)
	}
	return req, nil
}
