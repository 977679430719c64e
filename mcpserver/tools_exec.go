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
	Command []string `json:"command,omitempty" jsonschema:"the program and its arguments: [\"make\", \"test\"]; give this or shell"`
	Shell   string   `json:"shell,omitempty" jsonschema:"a shell line, run by sh -c: \"make test 2>&1 | tail\"; give this or command"`
	Stdin   string   `json:"stdin,omitempty" jsonschema:"text given to the command on its stdin (default: none)"`
	Env     []string `json:"env,omitempty" jsonschema:"variables added to its environment, each as KEY=value"`
	Images  []string `json:"images,omitempty" jsonschema:"paths of images the command writes (PNG, JPEG, GIF or WebP), returned as image content once it ended"`
	Dir     string   `json:"dir,omitempty" jsonschema:"its working directory in the sandbox (default: the project's directory)"`
	Root    bool     `json:"root,omitempty" jsonschema:"run it as root of the sandbox (its own user namespace's root, not the host's)"`
	Timeout int      `json:"timeout_seconds,omitempty" jsonschema:"end it after this many seconds (default 300)"`
	Max     int      `json:"max_output_bytes,omitempty" jsonschema:"how much of each of stdout and stderr to return: its first and its last half (default and most: the server's cap, 64 KiB)"`
}

// execOut is an exec's result. Its output is in the text content alone
// (Stdout and Stderr are not in the structured content): an agent pays
// for it once. The structured content carries the status and the counts.
type execOut struct {
	ExitCode int    `json:"exit_code" jsonschema:"its exit status as a shell gives it: 0 is success; 128+N when signal N ended it"`
	How      string `json:"how" jsonschema:"how it ended: exited, signaled, timed-out, output-limit, oom-killed, or lost (the sandbox ended first)"`
	Signal   int    `json:"signal,omitempty" jsonschema:"the signal that ended it"`
	Stdout   string `json:"-"`
	Stderr   string `json:"-"`
	// The counts say how much there was, also of what was cut.
	StdoutBytes int64    `json:"stdout_bytes"`
	StderrBytes int64    `json:"stderr_bytes"`
	StdoutCut   int64    `json:"stdout_cut_bytes,omitempty" jsonschema:"bytes of stdout left out of the text, in its middle"`
	StderrCut   int64    `json:"stderr_cut_bytes,omitempty" jsonschema:"bytes of stderr left out of the text, in its middle"`
	Seconds     float64  `json:"seconds"`
	Notes       []string `json:"notes,omitempty" jsonschema:"what to know about this result: output cut, a limit that ended it, the sandbox's network policy"`
}

// text is the result as an agent reads it: how it ended, then its
// stdout, its stderr and the notes, each under a heading when there is
// any.
func (o execOut) text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "exit status %d (%s", o.ExitCode, o.How)
	if o.Signal != 0 {
		fmt.Fprintf(&b, " by signal %d", o.Signal)
	}
	fmt.Fprintf(&b, ") after %gs; stdout %s, stderr %s\n", o.Seconds, plural(o.StdoutBytes, "byte"), plural(o.StderrBytes, "byte"))
	writeSection(&b, "stdout", o.Stdout)
	writeSection(&b, "stderr", o.Stderr)
	writeNotes(&b, o.Notes)
	return b.String()
}

type spawnIn struct {
	Sandbox string   `json:"sandbox" jsonschema:"the sandbox: its id, its name, or the start of its id"`
	Command []string `json:"command,omitempty" jsonschema:"the program and its arguments: [\"python3\", \"-m\", \"http.server\"]; give this or shell"`
	Shell   string   `json:"shell,omitempty" jsonschema:"a shell line, run by sh -c: \"./server --port 8080 > server.log 2>&1\"; give this or command"`
	Env     []string `json:"env,omitempty" jsonschema:"variables added to its environment, each as KEY=value"`
	Dir     string   `json:"dir,omitempty" jsonschema:"its working directory in the sandbox (default: the project's directory)"`
	Root    bool     `json:"root,omitempty" jsonschema:"run it as root of the sandbox"`
	Timeout int      `json:"timeout_seconds,omitempty" jsonschema:"end it after this many seconds (default: it runs until it ends)"`
	Restart bool     `json:"restart,omitempty" jsonschema:"start it again each time the sandbox starts (sandbox_start, the host's reboot, a rollback): a server the sandbox keeps"`
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

// logsOut is what logs returns. A process's output is in the text
// content alone, as exec's is; a listing of processes is its JSON.
type logsOut struct {
	Processes []processOut `json:"processes,omitempty" jsonschema:"the background processes, when no process was asked for"`
	Output    string       `json:"-"`
	Bytes     int          `json:"output_bytes,omitempty" jsonschema:"how many bytes of its output (stdout and stderr together, at most 64 KiB) the text has, from offset"`
	Next      uint64       `json:"next_offset,omitempty" jsonschema:"where the next call reads on"`
	Ended     bool         `json:"ended,omitempty" jsonschema:"the process ended and this is the end of its output"`
	Notes     []string     `json:"notes,omitempty"`
}

// text is a process's output under a line that says where it ends and
// whether the process did; "" for a listing (its JSON is the text).
func (o logsOut) text() string {
	if o.Processes != nil {
		return ""
	}
	var b strings.Builder
	state := "it still runs"
	if o.Ended {
		state = "it ended: this is the end of its output"
	}
	fmt.Fprintf(&b, "%s of output; next_offset %d; %s\n", plural(o.Bytes, "byte"), o.Next, state)
	writeSection(&b, "output", o.Output)
	writeNotes(&b, o.Notes)
	return b.String()
}

func (s *server) addExecTools(m *mcp.Server) {
	add(s, m, &mcp.Tool{Name: "exec", Annotations: runsCode("Run a command"),
		Description: fmt.Sprintf("Run a command in a sandbox and wait for it: command, an argv, or shell, a line run by sh -c. Returns its exit status, how it ended and its output "+
			"(the first and last %d KiB of each of stdout and stderr; max_output_bytes asks for less). A command that fails is a result with its status, not an error. "+
			"It runs as you, in the project's directory, with no terminal; it is ended after timeout_seconds (default %d, at most %d) "+
			"or once it wrote more than %s.",
			s.opts.OutputCap/2>>10, int(s.opts.ExecTimeout.Seconds()), int(s.opts.MaxExecTimeout.Seconds()), s.opts.OutputLimit)},
		s.exec)
	add(s, m, &mcp.Tool{Name: "spawn", Annotations: runsCode("Start a background process"),
		Description: "Start a command in the background in a sandbox (a server, a long build; command, an argv, or shell, a line run by sh -c) and return its process id at once; its output goes to a log that logs reads. It runs until it ends, its timeout, or the sandbox's end."},
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
	argv, err := commandOf(in.Command, in.Shell)
	if err != nil {
		return execOut{}, err
	}
	keep := s.opts.OutputCap
	if in.Max < 0 || in.Max > s.opts.OutputCap {
		return execOut{}, invalidf("max_output_bytes is %d: give 1 to %d (the server's cap), or 0 for the cap", in.Max, s.opts.OutputCap)
	} else if in.Max > 0 {
		keep = in.Max
	}
	sb, err := s.sandbox(ctx, in.Sandbox)
	if err != nil {
		return execOut{}, err
	}
	stdout, stderr := newCapture(keep), newCapture(keep)
	opts := client.ExecOptions{Stdout: stdout, Stderr: stderr, Env: in.Env, Dir: in.Dir, Root: in.Root,
		Timeout: timeout, OutputLimit: s.opts.OutputLimit}
	if in.Stdin != "" {
		opts.Stdin = strings.NewReader(in.Stdin)
	}
	spools, stop := s.execStreams(ctx, &opts)
	defer stop()
	start := time.Now()
	st, err := sb.Exec(ctx, argv, opts)
	if err != nil {
		return execOut{}, err
	}
	out := execOut{ExitCode: st.Code, How: st.How, Signal: st.Signal, Seconds: time.Since(start).Round(time.Millisecond).Seconds()}
	for _, o := range []struct {
		name   string
		c      *capture
		text   *string
		n, cut *int64
	}{{"stdout", stdout, &out.Stdout, &out.StdoutBytes, &out.StdoutCut}, {"stderr", stderr, &out.Stderr, &out.StderrBytes, &out.StderrCut}} {
		r := o.c.result()
		*o.text, *o.n, *o.cut = r.text, r.total, r.cut
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
	if !st.Success() && networkFailure(out.Stdout+"\n"+out.Stderr) {
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

// networkFailures are what tools print when the network was refused
// them, lower-cased: curl, wget, pip, npm, git, ssh, Python, Go and libc.
var networkFailures = []string{
	"could not resolve", "name resolution", "name or service not known", "nodename nor servname",
	"no address associated", "getaddrinfo", "eai_again", "network is unreachable", "enetunreach",
	"no route to host", "ehostunreach", "connection refused", "econnrefused", "failed to connect",
	"could not connect", "couldn't connect", "unable to connect", "connection timed out", "etimedout",
	"failed to establish a new connection", "proxyerror", "proxy error", "403 forbidden", "returned error: 403",
	"sandboxd egress proxy", "dial tcp", "no such host",
}

// networkFailure says whether a failed command's output shows it was
// refused the network; only then does the network's note help.
func networkFailure(output string) bool {
	output = strings.ToLower(output)
	for _, f := range networkFailures {
		if strings.Contains(output, f) {
			return true
		}
	}
	return false
}

// commandOf is the argv an exec or spawn runs: command, or shell run by
// sh -c; exactly one of them.
func commandOf(command []string, shell string) ([]string, error) {
	switch {
	case len(command) > 0 && shell != "":
		return nil, invalidf("both command and shell are given: give command (the program and its arguments) or shell (a line run by sh -c), not both")
	case shell != "":
		return []string{"sh", "-c", shell}, nil
	case len(command) == 0:
		return nil, invalidf("command is empty and shell is not given: give command, the program and its arguments ([\"make\", \"test\"]), or shell, a line run by sh -c (\"make test | tail\")")
	case command[0] == "":
		return nil, invalidf("command's program (its first item) is empty: give the program to run")
	}
	return command, nil
}

// networkNote tells, after a command failed on the network, what the
// sandbox's network lets through: a command refused the network fails
// however often it is run again.
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
	argv, err := commandOf(in.Command, in.Shell)
	if err != nil {
		return spawnOut{}, err
	}
	if in.Timeout < 0 {
		return spawnOut{}, invalidf("timeout_seconds is %d: give a positive number, or none", in.Timeout)
	}
	sb, err := s.sandbox(ctx, in.Sandbox)
	if err != nil {
		return spawnOut{}, err
	}
	p, err := sb.Spawn(ctx, argv, client.ExecOptions{Env: in.Env, Dir: in.Dir, Root: in.Root,
		Timeout: time.Duration(in.Timeout) * time.Second, Restart: in.Restart})
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
	out := logsOut{Output: text, Bytes: len(data), Next: next, Ended: ended}
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
