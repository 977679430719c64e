package supervisor

// Background processes (issue 21): commands that outlive the call that
// started them, kept by the sandbox's init with their logs, so that they
// run on through a daemon restart and their caller's going.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sandboxd/sandboxd/runtime/nsinit"
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
func (s *Supervisor) stopWatch(id string) {
	s.procHooks.mu.Lock()
	w := s.procHooks.watches[id]
	delete(s.procHooks.watches, id)
	s.procHooks.mu.Unlock()
	if w != nil {
		w.end()
	}
}

// watchAdopted watches the processes of an init found again after the
// daemon's restart that ran on while it was away. A frozen init cannot
// answer: the watch starts at its first spawn. Only an init whose layer
// holds logs has had any (a daemon that starts beside a thousand
// sandboxes asks only those).
func (s *Supervisor) watchAdopted(ctx context.Context, st Started) {
	if !st.Adopted || st.Record.State == state.Frozen || !s.hadProcesses(ctx, st.Record) {
		return
	}
	lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	ps, err := nsinit.ListProcesses(lctx, nsinit.Control(s.runtimeDir(st.Record.ID)))
	cancel()
	if err == nil && slices.ContainsFunc(ps, nsinit.Process.Running) {
		s.watchProcesses(st.Record.ID, st.PID)
	}
}

// OnProcessExited sets what is called when a background process ends.
func (s *Supervisor) OnProcessExited(fn func(sandbox string, p nsinit.Process)) {
	s.procHooks.mu.Lock()
	s.procHooks.exited = fn
	s.procHooks.mu.Unlock()
}

// Spawn starts a background process in sandbox id, as Exec would start a
// command (o's Stdio, PTY and OutputLimit aside: its stdin is /dev/null,
// its output goes to its log), and returns its id once it runs.
func (s *Supervisor) Spawn(ctx context.Context, id string, o ExecOptions) (_ string, err error) {
	if err := s.wake(ctx, id); err != nil {
		return "", err
	}
	rec, err := s.cfg.Store.Get(id)
	if err != nil {
		return "", err
	}
	defer func() {
		s.auditEntry(ctx, audit.Entry{Action: "spawn", Command: strings.Join(o.Argv, " ")}, rec, err)
	}()
	o.PTY, o.OutputLimit, o.Stdio = false, 0, nil
	req, err := s.commandRequest(ctx, rec, o, "starting a background process")
	if err != nil {
		return "", err
	}
	proc := newCommandID()
	req.Spawn = proc
	w := s.worlds.get(id)
	if w == nil {
		return "", fmt.Errorf("starting a background process in sandbox %s: %w", id, nsinit.ErrNotRunning)
	}
	s.watchProcesses(id, w.pid)
	cg, err := nsinit.NewCommandCgroup(w.pid, processCgroup(proc))
	if err != nil {
		return "", fmt.Errorf("starting a background process in sandbox %s: its cgroup: %w", id, err)
	}
	req.Cgroup = true
	key := id + "/" + proc
	s.procHooks.mu.Lock() // before the spawn: it may end before Spawn returns
	if s.procHooks.cgroups == nil {
		s.procHooks.cgroups = map[string]*nsinit.CommandCgroup{}
	}
	s.procHooks.cgroups[key] = cg
	s.procHooks.mu.Unlock()
	pid, err := nsinit.Spawn(ctx, nsinit.Control(s.runtimeDir(id)), req, cg.Files())
	if err != nil {
		s.procHooks.mu.Lock()
		delete(s.procHooks.cgroups, key)
		s.procHooks.mu.Unlock()
		_ = cg.Remove()
		if errors.Is(err, nsinit.ErrTooMany) {
			err = fmt.Errorf("%w: %w", ErrLimitReached, err)
		}
		return "", fmt.Errorf("starting a background process in sandbox %s: %w", id, err)
	}
	s.procHooks.mu.Lock() // processEnded may have it already
	cg.CloseFiles()
	s.procHooks.mu.Unlock()
	s.log.Info("background process started", "SANDBOX_ID", id, "ACTION", "spawn", "CALLER_UID", o.UID,
		"process", proc, "pid", pid, "as_root", o.AsRoot)
	return proc, nil
}

// ListProcesses lists sandbox id's background processes, oldest first.
func (s *Supervisor) ListProcesses(ctx context.Context, id string) ([]nsinit.Process, error) {
	if err := s.live(id); err != nil {
		return nil, fmt.Errorf("listing the background processes of sandbox %s: %w", id, err)
	}
	ps, err := nsinit.ListProcesses(ctx, nsinit.Control(s.runtimeDir(id)))
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: %w", id, err)
	}
	return ps, nil
}

// ReadLog reads at most max bytes of process proc's log from offset.
func (s *Supervisor) ReadLog(ctx context.Context, id, proc string, offset uint64, max uint32) (nsinit.LogChunk, error) {
	if err := s.live(id); err != nil {
		return nsinit.LogChunk{}, fmt.Errorf("reading a log of sandbox %s: %w", id, err)
	}
	c, err := nsinit.ReadLog(ctx, nsinit.Control(s.runtimeDir(id)), proc, offset, max)
	return c, processError(id, err)
}

// SignalProcess sends sig to background process proc's process group.
func (s *Supervisor) SignalProcess(ctx context.Context, id, proc string, sig syscall.Signal) error {
	if err := s.live(id); err != nil {
		return fmt.Errorf("signalling a process of sandbox %s: %w", id, err)
	}
	if sig <= 0 || sig > 64 {
		return fmt.Errorf("signalling process %s of sandbox %s: signal %d: want 1..64: %w", proc, id, sig, ErrInvalid)
	}
	return processError(id, nsinit.SignalProcess(ctx, nsinit.Control(s.runtimeDir(id)), proc, sig))
}

// processError names the supervisor's sentinels in an init's answer.
func processError(id string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, nsinit.ErrNoProcess):
		return fmt.Errorf("sandbox %s: %w: %w", id, ErrNoProcess, err)
	case errors.Is(err, nsinit.ErrPastEnd):
		return fmt.Errorf("sandbox %s: %w: %w", id, ErrInvalid, err)
	}
	return fmt.Errorf("sandbox %s: %w", id, err)
}

// live refuses a sandbox that is not running (frozen: its init cannot
// answer).
func (s *Supervisor) live(id string) error {
	if err := s.wake(context.Background(), id); err != nil {
		return err
	}
	rec, err := s.cfg.Store.Get(id)
	if err != nil {
		return err
	}
	if !rec.Runs() {
		return fmt.Errorf("it is %s: %w", rec.State, ErrWrongState)
	}
	if s.worlds.get(id) == nil {
		return nsinit.ErrNotRunning
	}
	return nil
}

// watchProcesses hears of the ends of sandbox id's background processes
// from its init (pid), for as long as that init is the sandbox's. It
// starts once per init; later calls do nothing.
func (s *Supervisor) watchProcesses(id string, pid int) {
	s.procHooks.mu.Lock()
	if s.procHooks.watches == nil {
		s.procHooks.watches = map[string]*procWatch{}
	}
	w := s.procHooks.watches[id]
	var old *procWatch
	if w == nil || w.pid != pid {
		old, w = w, &procWatch{pid: pid}
		s.procHooks.watches[id] = w
	}
	s.procHooks.mu.Unlock()
	if old != nil {
		old.end()
	}
	w.once.Do(func() { s.startWatch(id, w) })
}

func (s *Supervisor) startWatch(id string, w *procWatch) {
	ctx, cancel := context.WithCancel(context.Background())
	w.stop, w.done = cancel, make(chan struct{})
	ready := make(chan struct{})
	var readyOnce sync.Once
	go func() {
		defer close(w.done)
		defer readyOnce.Do(func() { close(ready) })
		socket := nsinit.Control(s.runtimeDir(id))
		for ctx.Err() == nil {
			err := nsinit.WatchProcesses(ctx, socket, func() { readyOnce.Do(func() { close(ready) }) },
				func(p nsinit.Process) { s.processEnded(id, p) })
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

func (s *Supervisor) processEnded(id string, p nsinit.Process) {
	s.procHooks.mu.Lock()
	cg := s.procHooks.cgroups[id+"/"+p.ID]
	delete(s.procHooks.cgroups, id+"/"+p.ID)
	if cg != nil {
		cg.CloseFiles()
	}
	fn := s.procHooks.exited
	s.procHooks.mu.Unlock()
	if cg != nil {
		if err := cg.Remove(); err != nil {
			s.log.Warn("removing a background process's cgroup", "SANDBOX_ID", id, "process", p.ID, "error", err)
		}
	}
	s.touch(id)
	s.log.Info("background process ended", "SANDBOX_ID", id, "ACTION", "spawn", "process", p.ID, "result", p.Result.String())
	if fn != nil {
		fn(id, p)
	}
}
