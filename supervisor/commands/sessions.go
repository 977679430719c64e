package commands

// Sessions (issue 21): a long-lived interpreter in a sandbox that takes
// inputs one at a time and keeps its variables between them, as an
// agent's REPL. The daemon holds the interpreter's stdin and stdout: a
// session lives as long as the daemon and the sandbox, and ends with
// either.

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/supervisor"
	"github.com/sandboxd/sandboxd/supervisor/audit"
)

var (
	//go:embed drivers/python3.py
	python3Driver string
	//go:embed drivers/sh.sh
	shDriver string
	//go:embed drivers/node.js
	nodeDriver string
)

// nodeLauncher starts the node driver with the protocol on fds 3 and 4
// and its output in an unlinked file it appends to (fd 1 and 2) and
// reads (fd 5): node cannot move its own descriptors.
const nodeLauncher = `t=$(mktemp) || exit 1
exec 3<&0 4>&1 </dev/null 1>>"$t" 2>&1 5<"$t"
rm -f "$t"
exec node -e "$1" "$2"`

// Languages a session may speak.
var sessionLanguages = []string{"python3", "node", "sh", "go", "sql"}

const (
	// maxSessions bounds one sandbox's open sessions.
	maxSessions = 8
	// MaxEvalOutput bounds what one input's output returns (the rest is
	// dropped).
	MaxEvalOutput = 1 << 20
	// MaxEvalInput bounds one input.
	MaxEvalInput = 1 << 20
	// defaultEvalTimeout ends an input that runs longer (and with it the
	// session, whose interpreter is then in no state to take another).
	defaultEvalTimeout = 5 * time.Minute
)

// ErrNoSession: no open session of that id in the sandbox.
var ErrNoSession = errors.New("no such session")

type session struct {
	id, sandbox, lang, token string
	uid                      uint32
	cmd                      *Command
	in                       *os.File
	out                      *bufio.Reader
	outFile                  *os.File
	// turn is held by the input that runs (one at a time); queued counts
	// the inputs admitted, running or waiting for it (sessions.mu).
	turn   chan struct{}
	queued int
	// ended is closed when the session ends.
	ended   chan struct{}
	endOnce sync.Once
}

type sessions struct {
	mu      sync.Mutex
	m       map[string]*session // sandbox/session
	opening map[string]int      // by sandbox: sessions being opened
	hold    evalHold            // inputs admitted, by owner and in all
}

// OpenSession starts an interpreter of lang (python3, node, sh, go, sql) in sandbox id,
// as Exec would start a command of o (its Argv, Stdio, PTY and limits
// aside), and returns the session's id.
func (c *Commands) OpenSession(ctx context.Context, id, lang string, o ExecOptions) (_ string, err error) {
	var argv []string
	token := newID() + newID()
	switch lang {
	case "python3":
		argv = []string{"python3", "-u", "-c", python3Driver, strconv.Itoa(MaxEvalOutput)}
	case "node":
		argv = []string{"/bin/sh", "-c", nodeLauncher, "node", nodeDriver, strconv.Itoa(MaxEvalOutput)}
	case "sh":
		argv = []string{"/bin/sh", "-c", shDriver, "sh", "__sandboxd_end_" + token + "__", strconv.Itoa(MaxEvalOutput)}
	case "go":
		argv = []string{"/bin/sh", "-c", goLauncher, "go", goDriver, strconv.Itoa(MaxEvalOutput)}
	case "sql":
		argv = []string{"python3", "-u", "-c", sqlDriver, strconv.Itoa(MaxEvalOutput)}
	default:
		return "", fmt.Errorf("opening a session in sandbox %s: language %q: want one of %s: %w", id, lang, strings.Join(sessionLanguages, ", "), supervisor.ErrInvalid)
	}
	// The place is taken under the lock, before the interpreter starts:
	// calls come at once.
	c.sessions.mu.Lock()
	n := c.sessions.opening[id]
	for _, x := range c.sessions.m {
		if x.sandbox == id {
			n++
		}
	}
	if n >= maxSessions {
		c.sessions.mu.Unlock()
		return "", fmt.Errorf("opening a session in sandbox %s: it has %d open; close one first: %w", id, n, supervisor.ErrLimitReached)
	}
	if c.sessions.opening == nil {
		c.sessions.opening = map[string]int{}
	}
	c.sessions.opening[id]++
	c.sessions.mu.Unlock()
	defer func() {
		c.sessions.mu.Lock()
		if c.sessions.opening[id]--; c.sessions.opening[id] <= 0 {
			delete(c.sessions.opening, id)
		}
		c.sessions.mu.Unlock()
	}()
	inR, inW, err := os.Pipe()
	if err != nil {
		return "", fmt.Errorf("opening a session in sandbox %s: %w", id, err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return "", fmt.Errorf("opening a session in sandbox %s: %w", id, err)
	}
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		closeFiles(inR, inW, outR, outW)
		return "", err
	}
	o.Argv, o.Stdio, o.PTY, o.OutputLimit, o.Timeout = argv, []*os.File{inR, outW, null}, false, 0, 0
	cmd, err := c.Exec(ctx, id, o)
	closeFiles(inR, outW, null) // the interpreter has its own copies
	if err != nil {
		closeFiles(inW, outR)
		return "", fmt.Errorf("opening a %s session: %w", lang, err)
	}
	x := &session{id: newID(), sandbox: id, lang: lang, token: token, uid: o.UID, cmd: cmd,
		in: inW, out: bufio.NewReader(outR), outFile: outR, turn: make(chan struct{}, 1), ended: make(chan struct{})}
	if greets(lang) {
		if err := readGreeting(ctx, x); err != nil {
			x.in.Close()
			_ = cmd.cmd.Signal(9)
			x.outFile.Close()
			return "", fmt.Errorf("opening a %s session in sandbox %s: %w", lang, id, err)
		}
	}
	c.sessions.mu.Lock()
	if c.sessions.m == nil {
		c.sessions.m = map[string]*session{}
	}
	c.sessions.m[id+"/"+x.id] = x
	c.sessions.mu.Unlock()
	go func() { // an interpreter that ends ends its session
		<-cmd.Done()
		c.dropSession(x)
	}()
	return x.id, nil
}

// Eval sends code to session sess of sandbox id (opened by uid, or root
// asks) and returns its output and status: 0 if it ran without error.
// An input that runs past o.Timeout ends the session. One input runs at
// a time; a few may wait for it (see admitEval), and any other is
// refused at once with ErrSessionBusy.
func (c *Commands) Eval(ctx context.Context, id, sess string, uid uint32, code string, o EvalOptions) (output string, status int, err error) {
	x, err := c.session(id, sess, uid)
	if err != nil {
		return "", 0, err
	}
	command := x.lang + " session " + x.id + ": " + code
	defer func() {
		rec, _ := c.h.Store().Get(id)
		c.h.AuditEntry(ctx, audit.Entry{Action: "eval", Command: command}, rec, err)
	}()
	if len(code) > MaxEvalInput {
		return "", 0, fmt.Errorf("session %s: an input of %d bytes, over %d: %w", sess, len(code), MaxEvalInput, supervisor.ErrInvalid)
	}
	if x.lang == "sh" && strings.Contains("\n"+code+"\n", "\n"+"__sandboxd_end_"+x.token+"__\n") {
		return "", 0, fmt.Errorf("session %s: the input holds the session's end marker: %w", sess, supervisor.ErrInvalid)
	}
	timeout := o.Timeout
	if timeout <= 0 {
		timeout = defaultEvalTimeout
	}
	release, err := c.admitEval(x, len(code))
	if err != nil {
		// Refused unread: the audit says what was refused, not its code.
		command = fmt.Sprintf("%s session %s: an input of %d bytes, refused", x.lang, x.id, len(code))
		return "", 0, fmt.Errorf("sandbox %s: %w", id, err)
	}
	if err := takeTurn(ctx, x, o.Watch, release); err != nil {
		return "", 0, fmt.Errorf("sandbox %s: %w", id, err)
	}
	defer release()
	defer func() { <-x.turn }()
	// The code is written as it is, behind its frame: no copy of it.
	before, after := strconv.Itoa(len(code))+"\n", ""
	if x.lang == "sh" {
		before, code, after = "", strings.TrimSuffix(code, "\n"), "\n__sandboxd_end_"+x.token+"__\n"
	}
	type answer struct {
		out    string
		status int
		err    error
	}
	done := make(chan answer, 1)
	go func() {
		for _, part := range []string{before, code, after} {
			if _, err := io.WriteString(x.in, part); err != nil {
				done <- answer{err: fmt.Errorf("the session ended: %w", err)}
				return
			}
		}
		// The header is short; anything else is the input writing on
		// the protocol's pipe itself, which ends the session (a read
		// without a bound would hold whatever it sent in the daemon).
		head, err := readHeader(x.out)
		if err != nil {
			done <- answer{err: err}
			return
		}
		var n, st int
		if _, err := fmt.Sscanf(head, "%d %d", &n, &st); err != nil || n < 0 || n > MaxEvalOutput {
			done <- answer{err: fmt.Errorf("the interpreter answered %q", strings.TrimSpace(head))}
			return
		}
		// The output is held as it comes, not as much as the header
		// claims, and only as much as the owner's answers being read
		// may hold: the rest is read and dropped, and the answer says
		// so.
		keep, giveBack := c.holdOutput(x, n)
		var buf bytes.Buffer
		_, err = io.CopyN(&buf, x.out, int64(keep))
		if err == nil {
			_, err = io.CopyN(io.Discard, x.out, int64(n-keep))
		}
		giveBack()
		if err != nil {
			done <- answer{err: fmt.Errorf("the session ended: %w", err)}
			return
		}
		if keep < n {
			fmt.Fprintf(&buf, "\n[sandboxd: %d bytes of this output dropped: the answers of uid %d's sessions being read hold %d bytes at most]\n", n-keep, x.uid, MaxEvalBytesPerOwner)
		}
		done <- answer{out: buf.String(), status: st}
	}()
	select {
	case a := <-done:
		if a.err != nil {
			c.endSession(x)
			return "", 0, fmt.Errorf("session %s of sandbox %s: %w", sess, id, a.err)
		}
		return a.out, a.status, nil
	case <-time.After(timeout):
		c.endSession(x)
		return "", 0, fmt.Errorf("session %s of sandbox %s: the input ran past %v; the session is ended: %w", sess, id, timeout, supervisor.ErrInvalid)
	case <-ctx.Done():
		c.endSession(x)
		return "", 0, ctx.Err()
	}
}

// CloseSession ends session sess of sandbox id.
func (c *Commands) CloseSession(ctx context.Context, id, sess string, uid uint32) error {
	x, err := c.session(id, sess, uid)
	if err != nil {
		return err
	}
	c.endSession(x)
	return nil
}

func (c *Commands) session(id, sess string, uid uint32) (*session, error) {
	c.sessions.mu.Lock()
	x := c.sessions.m[id+"/"+sess]
	c.sessions.mu.Unlock()
	if x == nil || uid != 0 && x.uid != uid {
		return nil, fmt.Errorf("sandbox %s: session %q: %w", id, sess, ErrNoSession)
	}
	return x, nil
}

// endSession stops the interpreter (its stdin closed, then its command
// signalled) and forgets the session.
func (c *Commands) endSession(x *session) {
	x.in.Close()
	_ = x.cmd.cmd.Signal(9)
	c.dropSession(x)
}

func (c *Commands) dropSession(x *session) {
	x.endOnce.Do(func() { close(x.ended) })
	c.sessions.mu.Lock()
	if c.sessions.m[x.sandbox+"/"+x.id] == x {
		delete(c.sessions.m, x.sandbox+"/"+x.id)
	}
	c.sessions.mu.Unlock()
	x.in.Close()
	x.outFile.Close()
}

func closeFiles(fs ...*os.File) {
	for _, f := range fs {
		f.Close()
	}
}

// maxHeader bounds an answer's header, "<length> <status>\n".
const maxHeader = 32

// readHeader reads an answer's header line, at most maxHeader bytes.
func readHeader(r *bufio.Reader) (string, error) {
	var b []byte
	for len(b) < maxHeader {
		c, err := r.ReadByte()
		if err != nil {
			return "", fmt.Errorf("the session ended: %w", err)
		}
		if c == '\n' {
			return string(b), nil
		}
		b = append(b, c)
	}
	return "", fmt.Errorf("the interpreter answered %d bytes with no end of line: not an answer", maxHeader)
}
