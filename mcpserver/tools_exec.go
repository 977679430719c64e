package mcpserver

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/sandboxd1"
)

// The tools that run commands: exec (and wait), spawn and logs (in the
// background).

type execIn struct {
	Sandbox string   `json:"sandbox" jsonschema:"the sandbox: its id, its name, or the start of its id"`
	Command []string `json:"command" jsonschema:"the program and its arguments, not a shell line: [\"make\", \"test\"]; for a shell line use [\"sh\", \"-c\", \"LINE\"]"`
	Stdin   string   `json:"stdin,omitempty" jsonschema:"text given to the command on its stdin (default: none)"`
	Env     []string `json:"env,omitempty" jsonschema:"variables added to its environment, each as KEY=value"`
	Images  []string `json:"images,omitempty" jsonschema:"paths of images the command writes (PNG, JPEG, GIF or WebP), returned as image content once it ended"`
	Dir     string   `json:"dir,omitempty" jsonschema:"its working directory in the sandbox (default: the project's directory)"`
	Root    bool     `json:"root,omitempty" jsonschema:"run it as root of the sandbox (its own user namespace's root, not the host's)"`
	Timeout int      `json:"timeout_seconds,omitempty" jsonschema:"end it after this many seconds (default 300)"`
}

type execOut struct {
	ExitCode int    `json:"exit_code" jsonschema:"its exit status as a shell gives it: 0 is success; 128+N when signal N ended it"`
	How      string `json:"how" jsonschema:"how it ended: exited, signaled, timed-out, output-limit, oom-killed, or lost (the sandbox ended first)"`
	Signal   int    `json:"signal,omitempty" jsonschema:"the signal that ended it"`
	Stdout   string `json:"stdout" jsonschema:"what it wrote to stdout: its start and its end when it wrote more than the server keeps"`
	Stderr   string `json:"stderr" jsonschema:"what it wrote to stderr, kept as stdout is"`
	// The counts say how much there was, also of what was cut.
	StdoutBytes int64    `json:"stdout_bytes"`
	StderrBytes int64    `json:"stderr_bytes"`
	Seconds     float64  `json:"seconds"`
	Notes       []string `json:"notes,omitempty" jsonschema:"what to know about this result: output cut, a limit that ended it, the sandbox's network policy"`
}

type spawnIn struct {
	Sandbox string   `json:"sandbox" jsonschema:"the sandbox: its id, its name, or the start of its id"`
	Command []string `json:"command" jsonschema:"the program and its arguments: [\"python3\", \"-m\", \"http.server\"]"`
	Env     []string `json:"env,omitempty" jsonschema:"variables added to its environment, each as KEY=value"`
	Dir     string   `json:"dir,omitempty" jsonschema:"its working directory in the sandbox (default: the project's directory)"`
	Root    bool     `json:"root,omitempty" jsonschema:"run it as root of the sandbox"`
	Timeout int      `json:"timeout_seconds,omitempty" jsonschema:"end it after this many seconds (default: it runs until it ends)"`
}

type spawnOut struct {
	Process string `json:"process" jsonschema:"the process's id, for logs"`
}

type logsIn struct {
	Sandbox string `json:"sandbox" jsonschema:"the sandbox: its id, its name, or the start of its id"`
	Process string `json:"process,omitempty" jsonschema:"the background process whose output to read; without it, the sandbox's background processes are listed"`
	Offset  uint64 `json:"offset,omitempty" jsonschema:"where to read from, in bytes since it started: the next_offset of the last call"`
}

type processOut struct {
	ID       string   `json:"id"`
	Command  []string `json:"command"`
	Started  string   `json:"started"`
	Ended    string   `json:"ended,omitempty"`
	How      string   `json:"how,omitempty" jsonschema:"how it ended; empty while it runs"`
	ExitCode int      `json:"exit_code,omitempty"`
}

type logsOut struct {
	Processes []processOut `json:"processes,omitempty" jsonschema:"the background processes, when no process was asked for"`
	Output    string       `json:"output,omitempty" jsonschema:"its output (stdout and stderr together) from offset, at most 64 KiB"`
	Next      uint64       `json:"next_offset,omitempty" jsonschema:"where the next call reads on"`
	Ended     bool         `json:"ended,omitempty" jsonschema:"the process ended and this is the end of its output"`
	Notes     []string     `json:"notes,omitempty"`
}

func (s *server) addExecTools(m *mcp.Server) {
	add(s, m, &mcp.Tool{Name: "exec", Annotations: runsCode("Run a command"),
		Description: fmt.Sprintf("Run a command in a sandbox and wait for it; returns its exit status, how it ended and its output "+
			"(the first and last %d KiB of each of stdout and stderr). A command that fails is a result with its status, not an error. "+
			"It runs as you, in the project's directory, with no terminal; it is ended after timeout_seconds (default %d, at most %d) "+
			"or once it wrote more than %s.",
			s.opts.OutputCap/2>>10, int(s.opts.ExecTimeout.Seconds()), int(s.opts.MaxExecTimeout.Seconds()), s.opts.OutputLimit)},
		s.exec)
	add(s, m, &mcp.Tool{Name: "spawn", Annotations: runsCode("Start a background process"),
		Description: "Start a command in the background in a sandbox (a server, a long build) and return its process id at once; its output goes to a log that logs reads. It runs until it ends, its timeout, or the sandbox's end."},
		s.spawn)
	add(s, m, &mcp.Tool{Name: "logs", Annotations: readOnly("Read a background process's output"),
		Description: "Read a background process's output from an offset (64 KiB at most a call; call again from next_offset for more), and whether it ended; without a process, list the sandbox's background processes and how they ended."},
		s.logs)
}

func (s *server) exec(ctx context.Context, in execIn) (execOut, error) {
	timeout, err := seconds(in.Timeout, s.opts.ExecTimeout, s.opts.MaxExecTimeout, "timeout_seconds")
	if err != nil {
		return execOut{}, err
	}
	if len(in.Command) == 0 {
		return execOut{}, invalidf("command is empty: give the program and its arguments")
	}
	sb, err := s.sandbox(ctx, in.Sandbox)
	if err != nil {
		return execOut{}, err
	}
	stdout, stderr := newCapture(s.opts.OutputCap), newCapture(s.opts.OutputCap)
	opts := client.ExecOptions{Stdout: stdout, Stderr: stderr, Env: in.Env, Dir: in.Dir, Root: in.Root,
		Timeout: timeout, OutputLimit: s.opts.OutputLimit}
	if in.Stdin != "" {
		opts.Stdin = strings.NewReader(in.Stdin)
	}
	spools, stop := s.execStreams(ctx, &opts)
	defer stop()
	start := time.Now()
	st, err := sb.Exec(ctx, in.Command, opts)
	if err != nil {
		return execOut{}, err
	}
	out := execOut{ExitCode: st.Code, How: st.How, Signal: st.Signal, Seconds: time.Since(start).Round(time.Millisecond).Seconds()}
	for _, o := range []struct {
		name string
		c    *capture
		text *string
		n    *int64
	}{{"stdout", stdout, &out.Stdout, &out.StdoutBytes}, {"stderr", stderr, &out.Stderr, &out.StderrBytes}} {
		r := o.c.result()
		*o.text, *o.n = r.text, r.total
		if r.cut > 0 {
			out.Notes = append(out.Notes, fmt.Sprintf("%s was %d bytes: %d bytes in its middle were cut; redirect it to a file in the sandbox to read it whole (file_read, or exec head, tail, grep)",
				o.name, r.total, r.cut))
		}
		if r.binary {
			out.Notes = append(out.Notes, o.name+" is not UTF-8 text: its invalid bytes are shown as U+FFFD; write it to a file and file_read it to get its bytes (base64)")
		}
	}
	out.Notes = append(out.Notes, s.execExtras(ctx, sb, in.Images, in.Root, stdout, stderr, spools)...)
	out.Notes = append(out.Notes, s.endNotes(st, timeout)...)
	if !st.Success() {
		if note := s.networkNote(ctx, sb); note != "" {
			out.Notes = append(out.Notes, note)
		}
	}
	return out, nil
}

// endNotes say why a limit of the server's ended the command.
func (s *server) endNotes(st client.ExitStatus, timeout time.Duration) []string {
	switch st.How {
	case client.HowTimedOut:
		return []string{fmt.Sprintf("it was ended after %s, its timeout (timeout_seconds; at most %d)", timeout, int(s.opts.MaxExecTimeout.Seconds()))}
	case client.HowOutputLimit:
		return []string{fmt.Sprintf("it was ended once it wrote more than %s (stdout and stderr together), the exec tool's output limit: redirect its output to a file in the sandbox and read parts of it",
			s.opts.OutputLimit)}
	case client.HowOOMKilled:
		return []string{"the sandbox's memory limit killed it (sandbox_status shows the limit)"}
	case client.HowLost:
		return []string{"the sandbox ended or was rolled back while it ran"}
	}
	return nil
}

// networkNote tells, after a command failed, what the sandbox's network
// lets through: a command refused the network fails however often it is
// run again.
func (s *server) networkNote(ctx context.Context, sb *client.Sandbox) string {
	n, err := s.networkOf(ctx, sb)
	if err != nil {
		return ""
	}
	switch n.policy {
	case client.NetworkNone:
		return `this sandbox's network is "none": it reaches no other host, only its own loopback. If the command failed for want of the network, retrying will not help: it needs a sandbox made with network "allowlist" and allow naming what it must reach.`
	case client.NetworkAllowlist:
		allowed := "nothing"
		if len(n.allow) > 0 {
			allowed = strings.Join(n.allow, ", ")
		}
		return fmt.Sprintf(`this sandbox's network is "allowlist": it reaches only %s, through the proxy in its HTTP_PROXY and HTTPS_PROXY; any other host is refused (the proxy answers 403), and tools that ignore the proxy reach nothing. If the command failed on a refused connection, retrying will not help.`, allowed)
	}
	return ""
}

func (s *server) spawn(ctx context.Context, in spawnIn) (spawnOut, error) {
	if len(in.Command) == 0 {
		return spawnOut{}, invalidf("command is empty: give the program and its arguments")
	}
	if in.Timeout < 0 {
		return spawnOut{}, invalidf("timeout_seconds is %d: give a positive number, or none", in.Timeout)
	}
	sb, err := s.sandbox(ctx, in.Sandbox)
	if err != nil {
		return spawnOut{}, err
	}
	p, err := sb.Spawn(ctx, in.Command, client.ExecOptions{Env: in.Env, Dir: in.Dir, Root: in.Root,
		Timeout: time.Duration(in.Timeout) * time.Second})
	if err != nil {
		return spawnOut{}, err
	}
	return spawnOut{Process: p}, nil
}

func (s *server) logs(ctx context.Context, in logsIn) (logsOut, error) {
	sb, err := s.sandbox(ctx, in.Sandbox)
	if err != nil {
		return logsOut{}, err
	}
	if in.Process == "" {
		ps, err := sb.Processes(ctx)
		if err != nil {
			return logsOut{}, err
		}
		out := logsOut{Processes: []processOut{}}
		for _, p := range ps {
			out.Processes = append(out.Processes, processOf(p))
		}
		return out, nil
	}
	data, next, ended, err := sb.ReadLog(ctx, in.Process, in.Offset, client.MaxLogChunk)
	if err != nil {
		return logsOut{}, err
	}
	if !ended {
		// A character cut at the chunk's end is read whole by the next call.
		whole := trimPartialEnd(data)
		next -= uint64(len(data) - len(whole))
		data = whole
	}
	text, binary := utf8Text(data)
	out := logsOut{Output: text, Next: next, Ended: ended}
	if binary {
		out.Notes = append(out.Notes, "the output is not UTF-8 text: its invalid bytes are shown as U+FFFD")
	}
	if !ended {
		out.Notes = append(out.Notes, "it still runs: call again from next_offset for what it writes next")
	}
	return out, nil
}

func processOf(p sandboxd1.ProcessEntry) processOut {
	out := processOut{ID: p.ID, Command: p.Argv, Started: micros(p.Started), Ended: micros(p.Ended), How: p.How}
	if p.Ended != 0 {
		out.ExitCode = int(p.Status)
	}
	return out
}
