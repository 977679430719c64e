// Package mcpserver is sandboxd's MCP server: the agents' front door.
// It serves the Model Context Protocol (over stdio, or the streamable
// HTTP transport) with tools that are thin doors onto the daemon's D-Bus
// API through the Go client: sandboxes, commands, files, changes,
// checkpoints and promotion. It acts as the user that runs it, so every
// access rule of the daemon applies to the agent as to that user; there
// is no tool that approves a promotion.
//
// Every failure a tool meets is a tool error (a result with IsError and
// a text saying what was done to what, and what to do), never a protocol
// error: an agent reads it and goes on.
package mcpserver

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/mcpserver/args"
	"github.com/sandboxd/sandboxd/mcpserver/toolcall"
	"github.com/sandboxd/sandboxd/sandboxd1"
)

// The defaults of Options' bounds of exec.
const (
	DefaultExecTimeout    = 5 * time.Minute
	DefaultMaxExecTimeout = time.Hour
)

// Options are the server's bounds; a zero field takes its default.
type Options struct {
	// Version is the server's version, as it tells clients.
	Version string
	// ExecTimeout bounds an exec that asks for no timeout (5 min);
	// MaxExecTimeout is the most one may ask for (1 h).
	ExecTimeout, MaxExecTimeout time.Duration
	// OutputCap is how much of each of stdout and stderr an exec's result
	// keeps (64 KiB): its first and its last half; the rest is counted.
	OutputCap int
	// OutputLimit ends an exec's command once its stdout and stderr
	// together passed this much (32 MiB), so that a command printing
	// gigabytes ends rather than run on unread.
	OutputLimit sandboxd1.Size
	// MaxFileBytes bounds what file_read returns and file_write takes
	// in one call (1 MiB).
	MaxFileBytes int
	// MaxDiffBytes bounds diff's text (256 KiB).
	MaxDiffBytes uint64
	// PromoteWait is how long promote waits for the stages by default
	// (2 min); MaxPromoteWait the most it may be asked to (10 min).
	PromoteWait, MaxPromoteWait time.Duration
	// Logger receives the SDK's log; nil discards it.
	Logger *slog.Logger
	// Connect reaches the daemon when the server is given no client: at
	// the first call that needs it, and again once the connection to the
	// bus was lost. The server starts and lists its tools without it.
	Connect func(context.Context) (*client.Client, error)
}

func (o Options) withDefaults() Options {
	def := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&o.ExecTimeout, DefaultExecTimeout)
	def(&o.MaxExecTimeout, DefaultMaxExecTimeout)
	def(&o.PromoteWait, 2*time.Minute)
	def(&o.MaxPromoteWait, 10*time.Minute)
	o.ExecTimeout = min(o.ExecTimeout, o.MaxExecTimeout)
	o.PromoteWait = min(o.PromoteWait, o.MaxPromoteWait)
	if o.OutputCap <= 0 {
		o.OutputCap = 64 << 10
	}
	if o.OutputLimit == 0 {
		o.OutputLimit = 32 * sandboxd1.MiB
	}
	if o.MaxFileBytes <= 0 {
		o.MaxFileBytes = 1 << 20
	}
	if o.MaxDiffBytes == 0 {
		o.MaxDiffBytes = 256 << 10
	}
	if o.Version == "" {
		o.Version = "dev"
	}
	return o
}

// instructions tell a model, once, how the tools fit together.
const instructions = `sandboxd gives you sandboxes: copy-on-write copies of a project, seen inside a view of this host's own system, with limits. Nothing you do in one reaches the host until it is promoted.

Make one with sandbox_create (sandbox_list names the projects you may use), then work in it: exec runs a command and returns its output and exit status (a failing command is a result, not an error); file_read, file_write, file_edit and file_list work on its files (a relative path starts at the project's directory); spawn and logs run something in the background; repl keeps a python3, node, sh, go or sql interpreter between calls. diff shows what you changed; checkpoint and rollback keep and restore states; try runs several approaches side by side; sandbox_fork branches a sandbox as it stands (what it installed or built is in each fork); sandbox_stop keeps a sandbox without its processes until sandbox_start. A sandbox made with boot runs a systemd of its own: exec with root runs systemctl start on the host's services (nginx, postgresql...) there, on the sandbox's copies of their files, and system_status says when its system is up and which units failed. promote carries the changes into the project; a stage may need an administrator's approval, which no tool can give. Destroy sandboxes you no longer need.`

// server is the state behind the tools.
type server struct {
	c    *daemon
	opts Options
	// life ends when the server does: calls under way end with it.
	life context.Context

	repl *repls

	mu sync.Mutex
	// networks caches each sandbox's network policy (it never changes),
	// which exec names when a command failed.
	networks map[string]network
	// schemas are the tools' input schemas, by name, that
	// checkArguments checks a call's arguments against.
	schemas map[string]*jsonschema.Schema
}

// New returns an MCP server with sandboxd's tools, calling the daemon
// through c as c's user. ctx is the server's life: when it ends, the
// calls under way are cancelled (an exec's command is killed) and the
// REPL sessions the server opened are closed.
func New(ctx context.Context, c *client.Client, opts Options) *mcp.Server {
	m, s := newServer(ctx, c, opts)
	context.AfterFunc(ctx, s.repl.closeAll)
	return m
}

func newServer(ctx context.Context, c *client.Client, opts Options) (*mcp.Server, *server) {
	s := &server{c: newDaemon(c, opts.Connect), opts: opts.withDefaults(), life: ctx, networks: map[string]network{},
		schemas: map[string]*jsonschema.Schema{}}
	s.repl = newRepls()
	m := mcp.NewServer(&mcp.Implementation{Name: "sandboxd", Title: "sandboxd", Version: s.opts.Version},
		&mcp.ServerOptions{Instructions: instructions, Logger: opts.Logger})
	m.AddReceivingMiddleware(s.checkArguments)
	s.addSandboxTools(m)
	s.addForkTools(m)
	s.addExecTools(m)
	s.addFileTools(m)
	s.addChangeTools(m)
	s.addConflictTools(m)
	s.addPromoteTools(m)
	s.addReplTool(m)
	s.addSystemTools(m)
	s.addResources(m)
	m.AddReceivingMiddleware(toolcall.Middleware)
	return m, s
}

// errServerEnding is why a call is cancelled when the server ends.
var errServerEnding = errors.New("the MCP server is shutting down")

// bind is ctx, cancelled too when the server's life ends.
func (s *server) bind(ctx context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(s.life, func() { cancel(errServerEnding) })
	return ctx, func() { stop(); cancel(nil) }
}

// handler is what a tool does: its typed input to its typed output.
type handler[In, Out any] func(ctx context.Context, in In) (Out, error)

// texter is an output whose text content is its own (a command's
// output, once) rather than its structured content again as JSON; ""
// leaves the JSON.
type texter interface{ text() string }

// add registers a tool, its input schema with plain types; an error of
// h becomes a tool error (IsError, with its text and a hint), never a
// protocol error.
func add[In, Out any](s *server, m *mcp.Server, t *mcp.Tool, h handler[In, Out]) {
	schema, err := args.Schema[In]()
	if err != nil {
		panic(err) // a tool's input type that has no schema is a bug here
	}
	t.InputSchema = schema
	s.mu.Lock()
	s.schemas[t.Name] = schema
	s.mu.Unlock()
	mcp.AddTool(m, t, func(ctx context.Context, _ *mcp.CallToolRequest, in In) (*mcp.CallToolResult, Out, error) {
		ctx, done := s.bind(ctx)
		defer done()
		out, err := h(ctx, in)
		if err != nil {
			var zero Out
			return nil, zero, toolError(err)
		}
		if t, ok := any(out).(texter); ok {
			if text := t.text(); text != "" {
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}, out, nil
			}
		}
		return nil, out, nil
	})
}

// The tools' annotations, by what they do to the sandbox or project.
func readOnly(title string) *mcp.ToolAnnotations {
	return &mcp.ToolAnnotations{Title: title, ReadOnlyHint: true, DestructiveHint: new(false), OpenWorldHint: new(false)}
}

// additive tools make things and change none.
func additive(title string) *mcp.ToolAnnotations {
	return &mcp.ToolAnnotations{Title: title, DestructiveHint: new(false), OpenWorldHint: new(false)}
}

// destructive tools may overwrite or delete.
func destructive(title string) *mcp.ToolAnnotations {
	return &mcp.ToolAnnotations{Title: title, DestructiveHint: new(true), OpenWorldHint: new(false)}
}

// runsCode tools run what the agent wrote in the sandbox: it may change
// anything there, and reach what the sandbox's network allows.
func runsCode(title string) *mcp.ToolAnnotations {
	return &mcp.ToolAnnotations{Title: title, DestructiveHint: new(true), OpenWorldHint: new(true)}
}

// sandboxArg is the input field that names a sandbox.
type sandboxArg struct {
	Sandbox string `json:"sandbox" jsonschema:"the sandbox: its id, its name, or the start of its id"`
}

// sandbox finds the sandbox an input names.
func (s *server) sandbox(ctx context.Context, name string) (*client.Sandbox, error) {
	return s.c.Sandbox(ctx, name)
}

// micros is a time the bus gives in µs since the epoch, as RFC 3339 text
// ("" for none).
func micros(us uint64) string {
	if us == 0 {
		return ""
	}
	return time.UnixMicro(int64(us)).UTC().Format(time.RFC3339)
}

// seconds is an input's whole seconds as a duration, bounded by max;
// 0 is def.
func seconds(n int, def, max time.Duration, what string) (time.Duration, error) {
	if n < 0 {
		return 0, invalidf("%s is %d seconds: give a positive number, or 0 for the default (%s)", what, n, def)
	}
	if n == 0 {
		return def, nil
	}
	d := time.Duration(n) * time.Second
	if d > max {
		return 0, invalidf("%s is %d seconds, over the most this server allows (%s)", what, n, max)
	}
	return d, nil
}
