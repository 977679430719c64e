package commands

// Declared processes (issue 31): a background process spawned with
// Restart is kept in its sandbox's record (state.Process: what its spawn
// asked, as whom) and spawned again whenever the sandbox's init is new
// (Start, a restart after the host's reboot, a rollback, a rebase), not
// when the daemon finds a running one again. A caller undeclares one by
// ending it (SignalProcess with an ending signal); one that ends by
// itself stays declared, and runs again at the next start.

import (
	"context"
	"fmt"
	"slices"
	"syscall"

	"github.com/sandboxd/sandboxd/supervisor"
	"github.com/sandboxd/sandboxd/supervisor/state"
)

// Bounds of what a sandbox's record holds of its declared processes.
const (
	// MaxDeclared is the most processes one sandbox declares.
	MaxDeclared = 32
	// MaxDeclaredBytes bounds one declaration: its argv, environment and
	// working directory together.
	MaxDeclaredBytes = 16 << 10
)

// checkDeclared refuses a declaration of o that sandbox rec's record
// would not hold.
func checkDeclared(rec state.Record, o ExecOptions) error {
	n := len(o.Dir)
	for _, a := range slices.Concat(o.Argv, o.Env) {
		n += len(a) + 1
	}
	if n > MaxDeclaredBytes {
		return fmt.Errorf("declaring a process in sandbox %s: its command line, environment and directory are %d bytes, more than %d: %w", rec.ID, n, MaxDeclaredBytes, supervisor.ErrInvalid)
	}
	if len(rec.Processes) >= MaxDeclared {
		return fmt.Errorf("declaring a process in sandbox %s: it declares %d, the most one may; end one first (sandboxctl kill S PROCESS): %w", rec.ID, len(rec.Processes), supervisor.ErrLimitReached)
	}
	return nil
}

// declare records process proc, spawned as o asked, in sandbox rec's
// record; a record that cannot take it ends the process.
func (c *Commands) declare(ctx context.Context, rec state.Record, o ExecOptions, proc string) error {
	_, err := c.h.Store().Update(rec.ID, func(r *state.Record) error {
		if err := checkDeclared(*r, o); err != nil {
			return err
		}
		r.Processes = append(r.Processes, state.Process{Argv: o.Argv, Env: o.Env, Dir: o.Dir, UID: o.UID, AsRoot: o.AsRoot, ID: proc})
		return nil
	})
	if err != nil {
		_ = c.SignalProcess(ctx, rec.ID, proc, syscall.SIGKILL)
		return fmt.Errorf("declaring process %s in sandbox %s (ended): %w", proc, rec.ID, err)
	}
	return nil
}

// ending says whether sig ends a declared process for good.
func ending(sig syscall.Signal) bool {
	return sig == syscall.SIGTERM || sig == syscall.SIGKILL || sig == syscall.SIGINT || sig == syscall.SIGQUIT
}

// undeclare removes process proc's declaration from sandbox id's record,
// if it has one.
func (c *Commands) undeclare(ctx context.Context, id, proc string) error {
	rec, err := c.h.Store().Get(id)
	if err != nil || !slices.ContainsFunc(rec.Processes, func(p state.Process) bool { return p.ID == proc }) {
		return err
	}
	_, err = c.h.Store().Update(id, func(r *state.Record) error {
		r.Processes = slices.DeleteFunc(r.Processes, func(p state.Process) bool { return p.ID == proc })
		return nil
	})
	if err == nil {
		c.log.Info("declared process undeclared", "SANDBOX_ID", id, "ACTION", "spawn", "process", proc)
	}
	return err
}

// respawn spawns sandbox st.Record's declared processes in its new init
// (the Started hook), and records their new ids.
func (c *Commands) respawn(ctx context.Context, st supervisor.Started) {
	if st.Adopted || len(st.Record.Processes) == 0 {
		return
	}
	rec := st.Record
	rec.State = state.Ready // its record turns so once its start is done
	ids := map[string]string{}
	for _, p := range rec.Processes {
		proc, err := c.spawn(ctx, rec, ExecOptions{Argv: p.Argv, Env: p.Env, Dir: p.Dir, UID: p.UID, AsRoot: p.AsRoot})
		if err != nil { // it keeps its old id, which a caller may end it by
			c.log.Error("spawning a declared process again", "SANDBOX_ID", rec.ID, "ACTION", "spawn", "process", p.ID, "error", err)
			continue
		}
		c.log.Info("declared process spawned again", "SANDBOX_ID", rec.ID, "ACTION", "spawn", "process", proc, "was", p.ID)
		ids[p.ID] = proc
	}
	_, err := c.h.Store().Update(rec.ID, func(r *state.Record) error {
		for i, p := range r.Processes {
			if proc, ok := ids[p.ID]; ok {
				r.Processes[i].ID = proc
			}
		}
		return nil
	})
	if err != nil {
		c.log.Error("recording the declared processes' new ids", "SANDBOX_ID", rec.ID, "error", err)
	}
}
