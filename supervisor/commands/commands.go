package commands

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/runtime/nsinit"
	"github.com/sandboxd/sandboxd/supervisor"
)

// Host is the core as this room sees it: supervisor.Host and what only
// commands need of it (supervisor/host_commands.go).
type Host interface {
	supervisor.Host
	// UserNSUnavailable says why sandboxes get no user namespace of
	// their own (nil: they do): why a caller but root may not be root
	// in one without.
	UserNSUnavailable() error
}

// Commands runs commands, background processes, sessions and file calls
// in the sandboxes, and keeps what of them runs or is under way.
type Commands struct {
	h   Host
	log *slog.Logger

	cmds     table     // running commands
	files    fileCalls // under way, by sandbox
	procs    processHooks
	sessions sessions
}

var _ Runner = (*Commands)(nil)

// New makes the commands room over h: it joins h's hooks, registers its
// refusals and is h's runner from now on.
func New(h Host) *Commands {
	c := &Commands{h: h, log: h.Log()}
	hooks := h.Hooks()
	hooks.Busy.Add(c.busy)
	// Background processes: an init found again after the daemon's
	// restart is watched again, a new one spawns the declared ones; a
	// stopped one is watched no longer.
	hooks.Started.Add(func(ctx context.Context, st supervisor.Started) { c.watchAdopted(ctx, st); c.respawn(ctx, st) })
	hooks.Stopped.Add(c.stopWatch)
	for _, err := range []error{ErrNoCommand, ErrNoProcess, ErrNoSession, ErrNoFile, ErrNotBooted} {
		hooks.Refusals.Add(err)
	}
	return c
}

// busy says whether sandbox id runs a command or a background process,
// or has a file call under way (an idle sandbox is frozen). An init
// that cannot tell counts as busy.
func (c *Commands) busy(ctx context.Context, id string) bool {
	if c.files.running(id) || c.cmds.has(id) {
		return true
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	ps, err := nsinit.ListProcesses(ctx, nsinit.Control(c.h.RuntimeDir(id)))
	return err != nil || slices.ContainsFunc(ps, nsinit.Process.Running) // unknown: busy
}

// has says whether a command of sandbox id runs.
func (t *table) has(id string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k := range t.m {
		if strings.HasPrefix(k, id+"/") {
			return true
		}
	}
	return false
}
