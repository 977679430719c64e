package client

import (
	"context"
	"fmt"
	"syscall"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/sandboxd/sandboxd/sandboxd1"
)

// MaxLogChunk is the most ReadLog returns at once (the daemon's bound).
const MaxLogChunk = 64 << 10

// Spawn starts argv in the background and returns its process id once it
// runs. It outlives the call, this Client and a restart of the daemon;
// its stdin is /dev/null and its output goes to a log the sandbox keeps
// (ReadLog). opts' Env, Dir, Root, Timeout and Restart apply; the rest
// do not. A process spawned with Restart is started again each time the
// sandbox starts (Start, the host's reboot, a rollback).
func (s *Sandbox) Spawn(ctx context.Context, argv []string, opts ExecOptions) (string, error) {
	var process string
	m := opts.options(false)
	if opts.Restart {
		m[sandboxd1.OptRestart] = dbus.MakeVariant(true)
	}
	err := s.call(ctx, "starting "+commandName(argv)+" in the background in", sandboxd1.MethodSpawn,
		[]any{argv, m}, &process)
	return process, err
}

// Processes lists the sandbox's background processes, oldest first,
// running and ended.
func (s *Sandbox) Processes(ctx context.Context) ([]sandboxd1.ProcessEntry, error) {
	var ps []sandboxd1.ProcessEntry
	err := s.call(ctx, "listing the background processes of", sandboxd1.MethodListProcesses, nil, &ps)
	return ps, err
}

// ReadLog reads at most max bytes (0 or more than MaxLogChunk:
// MaxLogChunk) of a background process's output from offset, counted in
// bytes since it started. next is where to read on; ended is true once
// the process ended and next is the log's end. Where a rotation dropped
// offset, the data starts at the oldest byte kept.
func (s *Sandbox) ReadLog(ctx context.Context, process string, offset uint64, max uint32) (data []byte, next uint64, ended bool, err error) {
	if max == 0 || max > MaxLogChunk {
		max = MaxLogChunk
	}
	err = s.call(ctx, fmt.Sprintf("reading the log of process %s of", process), sandboxd1.MethodReadLog,
		[]any{process, offset, max}, &data, &next, &ended)
	return data, next, ended, err
}

// SignalProcess sends sig to a background process and its process group.
func (s *Sandbox) SignalProcess(ctx context.Context, process string, sig syscall.Signal) error {
	return s.call(ctx, fmt.Sprintf("sending signal %d to process %s of", int(sig), process), sandboxd1.MethodSignalProcess,
		[]any{process, int32(sig)})
}

// WaitProcess waits until a background process ended and returns its
// entry (How, Status, Signal say how it ended), asking the daemon now and
// then, at most once a second.
func (s *Sandbox) WaitProcess(ctx context.Context, process string) (sandboxd1.ProcessEntry, error) {
	pause := 50 * time.Millisecond
	for {
		ps, err := s.Processes(ctx)
		if err != nil {
			return sandboxd1.ProcessEntry{}, err
		}
		found := false
		for _, p := range ps {
			if p.ID == process {
				if p.Ended != 0 {
					return p, nil
				}
				found = true
			}
		}
		if !found {
			return sandboxd1.ProcessEntry{}, newError("waiting for process "+process+" of "+s.label(), sandboxd1.ErrorNoSuchCommand,
				"no background process %q", process)
		}
		select {
		case <-ctx.Done():
			return sandboxd1.ProcessEntry{}, fmt.Errorf("waiting for process %s of %s: %w", process, s.label(), ctx.Err())
		case <-time.After(pause):
		}
		pause = min(2*pause, time.Second)
	}
}
