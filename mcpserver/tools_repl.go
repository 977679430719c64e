package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/client"
)

// The repl tool: an interpreter kept between calls, one per sandbox and
// language, opened on first use and closed when the server ends (or the
// sandbox does).

type replIn struct {
	Sandbox  string `json:"sandbox" jsonschema:"the sandbox: its id, its name, or the start of its id"`
	Language string `json:"language" jsonschema:"python3, node or sh"`
	Code     string `json:"code" jsonschema:"the input: a statement, a block, or several; its variables, imports and functions stay for the next call"`
}

type replOut struct {
	Output string   `json:"output" jsonschema:"what it wrote, stdout and stderr together"`
	Status int      `json:"status" jsonschema:"0 when it ran without error"`
	Notes  []string `json:"notes,omitempty"`
}

// languages are the interpreters a session may be.
var languages = map[string]bool{"python3": true, "node": true, "sh": true}

// closeWait bounds closing one session when the server ends.
const closeWait = 5 * time.Second

// repls are the server's sessions, by sandbox id and language.
type repls struct {
	mu     sync.Mutex
	open   map[replKey]replSession
	closed bool
}

type replSession struct {
	sb *client.Sandbox
	id string
}

type replKey struct{ sandbox, language string }

func newRepls() *repls { return &repls{open: map[replKey]replSession{}} }

func (s *server) addReplTool(m *mcp.Server) {
	add(s, m, &mcp.Tool{Name: "repl", Annotations: runsCode("Evaluate in an interpreter"),
		Description: "Evaluate code in a python3, node or sh interpreter that lives in a sandbox between calls (one per sandbox and language, opened on first use): what one call defines, the next can use. Returns its output and status."},
		s.evalRepl)
}

func (s *server) evalRepl(ctx context.Context, in replIn) (replOut, error) {
	if !languages[in.Language] {
		return replOut{}, invalidf("language %q is none of python3, node, sh", in.Language)
	}
	sb, err := s.sandbox(ctx, in.Sandbox)
	if err != nil {
		return replOut{}, err
	}
	key := replKey{sb.ID(), in.Language}
	session, fresh, err := s.repl.session(ctx, sb, in.Language)
	if err != nil {
		return replOut{}, err
	}
	var notes []string
	output, status, err := sb.Eval(ctx, session, in.Code)
	if errors.Is(err, client.ErrNoSuchCommand) && !fresh {
		// The interpreter ended (exit(), a rollback): a new one, once.
		s.repl.drop(key, session)
		notes = append(notes, fmt.Sprintf("the %s session had ended, and what it defined with it; this ran in a new one", in.Language))
		if session, _, err = s.repl.session(ctx, sb, in.Language); err != nil {
			return replOut{}, err
		}
		output, status, err = sb.Eval(ctx, session, in.Code)
	}
	if err != nil {
		return replOut{}, err
	}
	c := newCapture(s.opts.OutputCap)
	c.Write([]byte(output))
	r := c.result()
	notes = append(notes, s.replFigures(ctx, sb, key)...)
	if r.cut > 0 {
		notes = append(notes, fmt.Sprintf("the output was %d bytes: %d in its middle were cut", r.total, r.cut))
	}
	if r.binary {
		notes = append(notes, "the output is not UTF-8 text: its invalid bytes are shown as U+FFFD")
	}
	return replOut{Output: r.text, Status: status, Notes: notes}, nil
}

// session is the session of sb and language, opened if there is none;
// fresh says it was opened now.
func (r *repls) session(ctx context.Context, sb *client.Sandbox, language string) (id string, fresh bool, err error) {
	key := replKey{sb.ID(), language}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return "", false, errServerEnding
	}
	if s, ok := r.open[key]; ok {
		return s.id, false, nil
	}
	// Opened under the lock, so that two calls at once make one session;
	// opening takes as long as the interpreter's start.
	id, err = sb.OpenSession(ctx, language, client.ExecOptions{})
	if err != nil {
		return "", false, err
	}
	r.open[key] = replSession{sb, id}
	return id, true, nil
}

// drop forgets session of key, if it is still the one kept.
func (r *repls) drop(key replKey, session string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.open[key].id == session {
		delete(r.open, key)
	}
}

// forget forgets a sandbox's sessions: the daemon ends them with it.
func (r *repls) forget(sandbox string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k := range r.open {
		if k.sandbox == sandbox {
			delete(r.open, k)
		}
	}
}

// closeAll closes every session the server opened; none opens after.
func (r *repls) closeAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	for k, s := range r.open {
		ctx, cancel := context.WithTimeout(context.Background(), closeWait)
		// A session the daemon ended already (its sandbox's end) is no
		// matter: there is nothing left to close.
		_ = s.sb.CloseSession(ctx, s.id)
		cancel()
		delete(r.open, k)
	}
}
