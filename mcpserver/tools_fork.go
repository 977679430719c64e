package mcpserver

import (
	"context"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/sandboxd1"
)

// The tools that branch a sandbox and keep it: fork, stop, start.

type forkIn struct {
	Sandbox string   `json:"sandbox" jsonschema:"the sandbox to fork: its id, its name, or the start of its id"`
	Count   int      `json:"count,omitempty" jsonschema:"how many forks to make, 1 to 16 (default 1)"`
	Names   []string `json:"names,omitempty" jsonschema:"a name for each fork, in order, at most count ('' for none); names are unique on the host"`
	Spawn   []string `json:"spawn,omitempty" jsonschema:"shell lines (run by sh -c) started in the background in each fork: the sandbox's own background processes are not carried"`
}

type forkOut struct {
	IDs        []string `json:"ids" jsonschema:"the forks' ids, in order: the other tools take them"`
	NotCarried []string `json:"not_carried" jsonschema:"the sandbox's background processes that ran and are not in the forks (their command lines): start them there again with spawn if needed"`
}

type stopOut struct {
	Stopped string `json:"stopped" jsonschema:"the id of the sandbox stopped"`
}

type startOut struct {
	Started string `json:"started" jsonschema:"the id of the sandbox started"`
}

func (s *server) addForkTools(m *mcp.Server) {
	add(s, m, &mcp.Tool{Name: "sandbox_fork", Annotations: additive("Fork a sandbox"),
		Description: fmt.Sprintf("Branch a sandbox as it stands, up to %d ways: each fork has its files and system (what it installed, built or loaded) and its settings, and changes apart from it and the others; "+
			"it is frozen for the instant of the snapshots. Background processes are not carried (not_carried lists them; spawn starts commands in each fork). Returns the forks' ids.", sandboxd1.MaxForks)},
		s.fork)
	add(s, m, &mcp.Tool{Name: "sandbox_stop", Annotations: &mcp.ToolAnnotations{Title: "Stop a sandbox", DestructiveHint: new(true), IdempotentHint: true, OpenWorldHint: new(false)},
		Description: "Stop a sandbox: its processes (and repl sessions) are ended; its files, checkpoints and ports are kept, across the host's reboots, until sandbox_start. Stopping a stopped sandbox does nothing."},
		s.stop)
	add(s, m, &mcp.Tool{Name: "sandbox_start", Annotations: &mcp.ToolAnnotations{Title: "Start a sandbox", DestructiveHint: new(false), IdempotentHint: true, OpenWorldHint: new(false)},
		Description: "Start a stopped sandbox again: a booted one boots, and background processes spawned with restart start again. Starting a running sandbox does nothing."},
		s.start)
}

func (s *server) fork(ctx context.Context, in forkIn) (forkOut, error) {
	if in.Count < 0 || in.Count > sandboxd1.MaxForks {
		return forkOut{}, invalidf("count is %d: give 1 to %d forks, or none for 1", in.Count, sandboxd1.MaxForks)
	}
	if n := max(in.Count, 1); len(in.Names) > n {
		return forkOut{}, invalidf("names has %d names for %d forks: give at most one a fork (count)", len(in.Names), n)
	}
	opts := client.ForkOptions{Count: in.Count, Names: in.Names}
	for i, line := range in.Spawn {
		if line == "" {
			return forkOut{}, invalidf("spawn[%d] is empty: give a shell line to start in each fork", i)
		}
		opts.Spawn = append(opts.Spawn, []string{"sh", "-c", line})
	}
	sb, err := s.sandbox(ctx, in.Sandbox)
	if err != nil {
		return forkOut{}, err
	}
	r, err := sb.Fork(ctx, opts)
	if err != nil {
		return forkOut{}, err
	}
	out := forkOut{IDs: r.IDs, NotCarried: r.NotCarried}
	if out.NotCarried == nil {
		out.NotCarried = []string{}
	}
	return out, nil
}

func (s *server) stop(ctx context.Context, in sandboxArg) (stopOut, error) {
	sb, err := s.sandbox(ctx, in.Sandbox)
	if err != nil {
		return stopOut{}, err
	}
	// Its sessions end with its processes; forgotten first, so that a
	// repl call meanwhile does not find a dead one.
	s.repl.forget(sb.ID())
	if err := sb.Stop(ctx); err != nil {
		return stopOut{}, err
	}
	return stopOut{Stopped: sb.ID()}, nil
}

func (s *server) start(ctx context.Context, in sandboxArg) (startOut, error) {
	sb, err := s.sandbox(ctx, in.Sandbox)
	if err != nil {
		return startOut{}, err
	}
	if err := sb.Start(ctx); err != nil {
		return startOut{}, err
	}
	return startOut{Started: sb.ID()}, nil
}
