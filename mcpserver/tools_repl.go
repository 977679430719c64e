package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/mcpserver/sqltable"
)

// The repl tool: an interpreter kept between calls, one per sandbox and
// language, opened on first use and closed when the server ends (or the
// sandbox does).

type replIn struct {
	Sandbox  string `json:"sandbox" jsonschema:"the sandbox: its id, its name, or the start of its id"`
	Language string `json:"language" jsonschema:"python3, node, sh, go (a snippet compiled and run against the project's module: its declarations stay, its statements run once) or sql (psql on a database the sandbox runs, e.g. a booted sandbox's PostgreSQL)"`
	Code     string `json:"code" jsonschema:"the input: a statement, a block, or several; its variables, imports and functions stay for the next call"`
	Database string `json:"database,omitempty" jsonschema:"sql: the database (default: the role's name)"`
	Role     string `json:"role,omitempty" jsonschema:"sql: the role to connect as (default: postgres); psql runs as the sandbox's user of that name, if there is one, as peer authentication wants"`
}

type replOut struct {
	Output string `json:"output" jsonschema:"what it wrote, stdout and stderr together"`
	Status int    `json:"status" jsonschema:"0 when it ran without error"`
	// Tables are a sql input's result sets; its output is then what
	// psql printed besides them.
	Tables []sqltable.Table `json:"tables,omitempty" jsonschema:"sql: each result set's columns and rows (a null cell is SQL's NULL); output holds the rest (command tags, notices, errors)"`
	Notes  []string         `json:"notes,omitempty"`
}

// languages are the interpreters a session may be.
var languages = map[string]bool{"python3": true, "node": true, "sh": true, "go": true, "sql": true}

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
	// nullMark is how a sql session's psql prints NULL.
	nullMark string
}

// replKey names a session: a sql session's database and role are part
// of it.
type replKey struct{ sandbox, language, database, role string }

func newRepls() *repls { return &repls{open: map[replKey]replSession{}} }

func (s *server) addReplTool(m *mcp.Server) {
	add(s, m, &mcp.Tool{Name: "repl", Annotations: runsCode("Evaluate in an interpreter"),
		Description: "Evaluate code in a python3, node, sh, go or sql interpreter that lives in a sandbox between calls (one per sandbox and language, and sql's database and role, opened on first use): what one call defines, the next can use. go: a snippet compiled and run against the project's module, its declarations kept. sql: one psql connection, so SET, temporary tables and transactions last; rows come back as tables. Returns its output and status."},
		s.evalRepl)
}

func (s *server) evalRepl(ctx context.Context, in replIn) (replOut, error) {
	if !languages[in.Language] {
		return replOut{}, invalidf("language %q is none of python3, node, sh, go, sql", in.Language)
	}
	if in.Language != "sql" && (in.Database != "" || in.Role != "") {
		return replOut{}, invalidf("database and role are for language sql, not %s", in.Language)
	}
	sb, err := s.sandbox(ctx, in.Sandbox)
	if err != nil {
		return replOut{}, err
	}
	key := replKey{sb.ID(), in.Language, in.Database, in.Role}
	session, fresh, err := s.repl.session(ctx, sb, key)
	if err != nil {
		return replOut{}, err
	}
	var notes []string
	output, status, err := sb.Eval(ctx, session.id, in.Code)
	if errors.Is(err, client.ErrNoSuchCommand) && !fresh {
		// The interpreter ended (exit(), a rollback): a new one, once.
		s.repl.drop(key, session.id)
		notes = append(notes, fmt.Sprintf("the %s session had ended, and what it defined with it; this ran in a new one", in.Language))
		if session, _, err = s.repl.session(ctx, sb, key); err != nil {
			return replOut{}, err
		}
		output, status, err = sb.Eval(ctx, session.id, in.Code)
	}
	if err != nil {
		return replOut{}, err
	}
	var tables []sqltable.Table
	if in.Language == "sql" {
		output, tables = sqltable.Results(output, session.nullMark)
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
	return replOut{Output: r.text, Status: status, Tables: tables, Notes: notes}, nil
}

// session is the session of key in sb, opened if there is none; fresh
// says it was opened now.
func (r *repls) session(ctx context.Context, sb *client.Sandbox, key replKey) (_ replSession, fresh bool, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return replSession{}, false, errServerEnding
	}
	if s, ok := r.open[key]; ok {
		return s, false, nil
	}
	// Opened under the lock, so that two calls at once make one session;
	// opening takes as long as the interpreter's start.
	var opts client.ExecOptions
	if key.language == "sql" {
		opts = sqlOptions(key)
	}
	id, err := sb.OpenSession(ctx, key.language, opts)
	if errors.Is(err, client.ErrNoIdmap) && opts.Root {
		// A sandbox without a user namespace of its own has no root
		// for its owner: psql runs as the caller, as the role.
		opts.Root = false
		id, err = sb.OpenSession(ctx, key.language, opts)
	}
	if err != nil {
		return replSession{}, false, err
	}
	s := replSession{sb: sb, id: id}
	if key.language == "sql" {
		s.nullMark = "null-" + randomMark()
		if _, status, err := sb.Eval(ctx, id, sqltable.Setup(s.nullMark)); err != nil || status != 0 {
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeWait)
			_ = sb.CloseSession(ctx, id)
			cancel()
			return replSession{}, false, fmt.Errorf("setting up the sql session's output (status %d): %w", status, err)
		}
	}
	r.open[key] = s
	return s, true, nil
}

// sqlOptions open a sql session of key: as root of the sandbox (where
// it has one), so that psql may run as the role's user (Debian's peer
// authentication), with libpq's environment naming the database and
// role.
func sqlOptions(key replKey) client.ExecOptions {
	o := client.ExecOptions{Root: true}
	if key.database != "" {
		o.Env = append(o.Env, "PGDATABASE="+key.database)
	}
	if key.role != "" {
		o.Env = append(o.Env, "PGUSER="+key.role)
	}
	return o
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
