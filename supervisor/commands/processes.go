package commands

// Background processes (issue 21): commands that outlive the call that
// started them, kept by the sandbox's init with their logs, so that they
// run on through a daemon restart and their caller's going.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sandboxd/sandboxd/runtime/nsinit"
	"github.com/sandboxd/sandboxd/supervisor"
	"github.com/sandboxd/sandboxd/supervisor/audit"
	"github.com/sandboxd/sandboxd/supervisor/state"
)

// ErrNoProcess: the sandbox has no background process of that id.
var ErrNoProcess = errors.New("no such background process")

// processCgroup names a background process's cgroup (beside the commands').
func processCgroup(id string) string { return "bg-" + id }

// processHooks are what the daemon's API hears of processes.
type processHooks struct {
	mu     sync.Mutex
	exited func(sandbox string, p nsinit.Process)
	// cgroups of the processes this daemon started, removed when each
	// ends (after a restart, the scope's stop removes what is left).
	cgroups map[string]*nsinit.CommandCgroup
	// watches of the inits' processes, by sandbox: one per init, from
	// its first process (a daemon that hears of none holds no
	// connection to the init).
	watches map[string]*procWatch
}

// procWatch is the watch of one init's background processes.
type procWatch struct {
	pid  int // the init's
	once sync.Once
	stop context.CancelFunc
	done chan struct{}
}

// end stops the watch, if it started, and waits for it; none starts
// after.
func (w *procWatch) end() {
	w.once.Do(func() {})
	if w.stop != nil {
		w.stop()
		<-w.done
	}
}

// stopWatch ends the watch of sandbox id's init (the Stopped hook).
func (c *Commands) stopWatch(id string) {
	c.procs.mu.Lock()
	w := c.procs.watches[id]
	delete(c.procs.watches, id)
	c.procs.mu.Unlock()
	if w != nil {
		w.end()
	}
}

// watchAdopted watches the processes of an init found again after the
// daemon's restart that ran on while it was away. A frozen init cannot
// answer: the watch starts at its first spawn. Only an init whose layer
// holds logs has had any (a daemon that starts beside a thousand
// sandboxes asks only those).
func (c *Commands) watchAdopted(ctx context.Context, st supervisor.Started) {
	if !st.Adopted || st.Record.State == state.Frozen || !c.hadProcesses(ctx, st.Record) {
		return
	}
	lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	ps, err := nsinit.ListProcesses(lctx, nsinit.Control(c.h.RuntimeDir(st.Record.ID)))
	cancel()
	if err == nil && slices.ContainsFunc(ps, nsinit.Process.Running) {
		c.watchProcesses(st.Record.ID, st.PID)
	}
}

// OnProcessExited sets what is called when a background process ends.
func (c *Commands) OnProcessExited(fn func(sandbox string, p nsinit.Process)) {
	c.procs.mu.Lock()
	c.procs.exited = fn
	c.procs.mu.Unlock()
}

// Spawn starts a background process in sandbox id, as Exec would start a
// command (o's Stdio, PTY and OutputLimit aside: its stdin is /dev/null,
// its output goes to its log), and returns its id once it runs. With
// o.Restart it is declared in the sandbox's record, and spawned again
// each time the sandbox starts (declared.go).
func (c *Commands) Spawn(ctx context.Context, id string, o ExecOptions) (_ string, err error) {
	if err := c.h.Wake(ctx, id); err != nil {
		return "", err
	}
	rec, err := c.h.Store().Get(id)
	if err != nil {
		return "", err
	}
	defer func() {
		c.h.AuditEntry(ctx, audit.Entry{Action: "spawn", Command: strings.Join(o.Argv, " ")}, rec, err)
	}()
	if o.Restart {
		if err := checkDeclared(rec, o); err != nil {
			return "", err
		}
	}
	proc, err := c.spawn(ctx, rec, o)
	if err != nil || !o.Restart {
		return proc, err
	}
	return proc, c.declare(ctx, rec, o, proc)
}

// spawn starts o's background process in sandbox rec, whose init runs.
func (c *Commands) spawn(ctx context.Context, rec state.Record, o ExecOptions) (string, error) {
	id := rec.ID
	o.PTY, o.OutputLimit, o.Stdio = false, 0, nil
	req, err := c.commandRequest(ctx, rec, o, "starting a background process")
	if err != nil {
		return "", err
	}
	proc := newID()
	req.Spawn = proc
	initPID, runs := c.h.InitPID(id)
	if !runs {
		return "", fmt.Errorf("starting a background process in sandbox %s: %w", id, nsinit.ErrNotRunning)
	}
	c.watchProcesses(id, initPID)
	cg, err := nsinit.NewCommandCgroup(initPID, processCgroup(proc))
	if err != nil {
		return "", fmt.Errorf("starting a background process in sandbox %s: its cgroup: %w", id, err)
	}
	req.Cgroup = true
	key := id + "/" + proc
	c.procs.mu.Lock() // before the spawn: it may end before Spawn returns
	if c.procs.cgroups == nil {
		c.procs.cgroups = map[string]*nsinit.CommandCgroup{}
	}
	c.procs.cgroups[key] = cg
	c.procs.mu.Unlock()
	pid, err := nsinit.Spawn(ctx, nsinit.Control(c.h.RuntimeDir(id)), req, cg.Files())
	if err != nil {
		c.procs.mu.Lock()
		delete(c.procs.cgroups, key)
		c.procs.mu.Unlock()
		_ = cg.Remove()
		if errors.Is(err, nsinit.ErrTooMany) {
			err = fmt.Errorf("%w: %w", supervisor.ErrLimitReached, err)
		}
		return "", fmt.Errorf("starting a background process in sandbox %s: %w", id, err)
	}
	c.procs.mu.Lock() // processEnded may have it already
	cg.CloseFiles()
	c.procs.mu.Unlock()
	c.log.Info("background process started", "SANDBOX_ID", id, "ACTION", "spawn", "CALLER_UID", o.UID,
		"process", proc, "pid", pid, "as_root", o.AsRoot)
	return proc, nil
}

// ListProcesses lists sandbox id's background processes, oldest first.
func (c *Commands) ListProcesses(ctx context.Context, id string) ([]nsinit.Process, error) {
	if err := c.live(id); err != nil {
		return nil, fmt.Errorf("listing the background processes of sandbox %s: %w", id, err)
	}
	ps, err := nsinit.ListProcesses(ctx, nsinit.Control(c.h.RuntimeDir(id)))
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: %w", id, err)
	}
	return ps, nil
}

// ReadLog reads at most max bytes of process proc's log from offset.
func (c *Commands) ReadLog(ctx context.Context, id, proc string, offset uint64, max uint32) (nsinit.LogChunk, error) {
	if err := c.live(id); err != nil {
		return nsinit.LogChunk{}, fmt.Errorf("reading a log of sandbox %s: %w", id, err)
	}
	chunk, err := nsinit.ReadLog(ctx, nsinit.Control(c.h.RuntimeDir(id)), proc, offset, max)
	return chunk, processError(id, err)
}

// SignalProcess sends sig to background process proc's process group.
func (c *Commands) SignalProcess(ctx context.Context, id, proc string, sig syscall.Signal) error {
	if err := c.live(id); err != nil {
		return fmt.Errorf("signalling a process of sandbox %s: %w", id, err)
	}
	if sig <= 0 || sig > 64 {
		return fmt.Errorf("signalling process %s of sandbox %s: signal %d: want 1..64: %w", proc, id, sig, supervisor.ErrInvalid)
	}
	if ending(sig) {
		if err := c.undeclare(ctx, id, proc); err != nil {
			return fmt.Errorf("signalling process %s of sandbox %s: %w", proc, id, err)
		}
	}
	return processError(id, nsinit.SignalProcess(ctx, nsinit.Control(c.h.RuntimeDir(id)), proc, sig))
}

// processError names this room's and the core's sentinels in an init's
// answer.
func processError(id string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, nsinit.ErrNoProcess):
		return fmt.Errorf("sandbox %s: %w: %w", id, ErrNoProcess, err)
	case errors.Is(err, nsinit.ErrPastEnd):
		return fmt.Errorf("sandbox %s: %w: %w", id, supervisor.ErrInvalid, err)
	}
	return fmt.Errorf("sandbox %s: %w", id, err)
}

// live refuses a sandbox that is not running (frozen: its init cannot
// answer).
func (c *Commands) live(id string) error {
	if err := c.h.Wake(context.Background(), id); err != nil {
		return err
	}
	rec, err := c.h.Store().Get(id)
	if err != nil {
		return err
	}
	if !rec.Runs() {
		return fmt.Errorf("it is %s: %w", rec.State, supervisor.ErrWrongState)
	}
	if _, runs := c.h.InitPID(id); !runs {
		return nsinit.ErrNotRunning
	}
	return nil
}

// watchProcesses hears of the ends of sandbox id's background processes
// from its init (pid), for as long as that init is the sandbox's. It
// starts once per init; later calls do nothing.
func (c *Commands) watchProcesses(id string, pid int) {
	c.procs.mu.Lock()
	if c.procs.watches == nil {
		c.procs.watches = map[string]*procWatch{}
	}
	w := c.procs.watches[id]
	var old *procWatch
	if w == nil || w.pid != pid {
		old, w = w, &procWatch{pid: pid}
		c.procs.watches[id] = w
	}
	c.procs.mu.Unlock()
	if old != nil {
		old.end()
	}
	w.once.Do(func() { c.startWatch(id, w) })
}

func (c *Commands) startWatch(id string, w *procWatch) {
	ctx, cancel := context.WithCancel(context.Background())
	w.stop, w.done = cancel, make(chan struct{})
	ready := make(chan struct{})
	var readyOnce sync.Once
	go func() {
		defer close(w.done)
		defer readyOnce.Do(func() { close(ready) })
		socket := nsinit.Control(c.h.RuntimeDir(id))
		for ctx.Err() == nil {
			err := nsinit.WatchProcesses(ctx, socket, func() { readyOnce.Do(func() { close(ready) }) },
				func(p nsinit.Process) { c.processEnded(id, p) })
			if ctx.Err() != nil || errors.Is(err, nsinit.ErrNotRunning) {
				return
			}
			// A frozen init, or one restarting: try again a little later.
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}()
	// A process that ends at once must be heard of: the watch is taken
	// before the first spawn goes out.
	select {
	case <-ready:
	case <-time.After(2 * time.Second):
	}
}

func (c *Commands) processEnded(id string, p nsinit.Process) {
	c.procs.mu.Lock()
	cg := c.procs.cgroups[id+"/"+p.ID]
	delete(c.procs.cgroups, id+"/"+p.ID)
	if cg != nil {
		cg.CloseFiles()
	}
	fn := c.procs.exited
	c.procs.mu.Unlock()
	if cg != nil {
		if err := cg.Remove(); err != nil {
			c.log.Warn("removing a background process's cgroup", "SANDBOX_ID", id, "process", p.ID, "error", err)
		}
	}
	c.h.Touch(id)
	c.log.Info("background process ended", "SANDBOX_ID", id, "ACTION", "spawn", "process", p.ID, "result", p.Result.String())
	if fn != nil {
		fn(id, p)
	}
}

// hadProcesses reports whether sandbox rec's init has kept a background
// process's log in its layer (true where that cannot be told: a tmpfs
// layer, an unreadable one).
func (c *Commands) hadProcesses(ctx context.Context, rec state.Record) bool {
	if rec.Layer == "" {
		return true
	}
	v, err := c.h.Backend().Get(ctx, rec.Layer)
	if err != nil {
		return true
	}
	f, err := os.Open(filepath.Join(v.Path, "processes"))
	if errors.Is(err, os.ErrNotExist) {
		return false
	}
	if err != nil {
		return true
	}
	defer f.Close()
	names, _ := f.Readdirnames(1)
	return len(names) > 0
}
