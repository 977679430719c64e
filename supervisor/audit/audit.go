// Package audit is sandboxd's append-only record of every state-changing
// action: who (the caller's uid, or the daemon itself), what, to which
// sandbox, and how it ended. One JSON object per line, each written whole
// with one write(2) on a file opened O_APPEND and synced before the call
// returns, so lines never interleave or tear and survive a crash.
//
// What one caller can make the root daemon write is bounded: the file is
// rotated at a size (rotate.go), each uid has a budget of lines a minute
// past which its lines are counted, not written (budget.go), and a
// refusal's free text is cut short.
package audit

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/sandboxd/sandboxd/internal/termsafe"
)

// Entry is one line of the log.
type Entry struct {
	Time time.Time `json:"time"`
	// CallerUID is the uid that asked; nil when the daemon acted on its
	// own (a time to live ran out, a reconcile).
	CallerUID *uint32 `json:"caller_uid"`
	Action    string  `json:"action"` // create, destroy, expire, ...
	Sandbox   string  `json:"sandbox,omitempty"`
	Project   string  `json:"project,omitempty"`
	Result    string  `json:"result"` // "ok", "error" or "left-out" (a LeftOut line)
	Error     string  `json:"error,omitempty"`
	// Refused marks an error that is the caller's (access denied, no
	// such sandbox or file, invalid input, a limit): its Error and
	// Command are cut to RefusedField, and it spends the caller's
	// refusal budget, not the one of its actions.
	Refused bool `json:"refused,omitempty"`
	// Network of a created sandbox (host access is worth a line), and
	// Command of an exec, as argv joined by spaces.
	Network string `json:"network,omitempty"`
	Command string `json:"command,omitempty"`
	// Location of a project added or removed (project-add,
	// project-remove): the volume the project's name stood for.
	Location string `json:"location,omitempty"`
	// Promotion is a promotion's step (promote, promote-stage,
	// promote-waiting, promote-approve, promote-reject, promote-done).
	Promotion *Promotion `json:"promotion,omitempty"`
	// LeftOut is a summary line's (action "audit-left-out"): the
	// caller's lines that its budget left out since the last one.
	LeftOut *LeftOut `json:"left_out,omitempty"`
}

// Promotion is what the audit log keeps of a promotion's step: which
// promotion and stage, the change set's size and digest, the conflicts
// forced over, the checks' results and an admin's decision.
type Promotion struct {
	ID         string   `json:"id"`
	State      string   `json:"state"`
	Stage      string   `json:"stage,omitempty"`
	Target     string   `json:"target,omitempty"`
	StageState string   `json:"stage_state,omitempty"`
	Changes    int      `json:"changes"`
	Digest     string   `json:"digest,omitempty"`
	Conflicts  []string `json:"conflicts,omitempty"`
	Forced     bool     `json:"forced,omitempty"`
	Checks     []Check  `json:"checks,omitempty"`
	Approved   bool     `json:"approved,omitempty"`
	DecidedBy  *uint32  `json:"decided_by,omitempty"`
}

// Check is one check's result.
type Check struct {
	Command  string `json:"command"`
	How      string `json:"how"`
	Status   int    `json:"status"`
	Duration string `json:"duration"`
}

// MaxField bounds a free-text field of a line (Command, Error): a caller
// must not make the root daemon write and sync megabytes per call.
const MaxField = 4096

// RefusedField bounds the free text of a refused call's line: a refusal
// costs the caller nothing, so what it makes the daemon write is kept
// short (the error's start names the problem; a long path is cut).
const RefusedField = 256

// Truncate cuts s to at most limit bytes (on a UTF-8 boundary), ending what
// it cut with a marker that says how much was left out.
func Truncate(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	marker := fmt.Sprintf("... [cut: %d bytes in all]", len(s))
	cut := limit - len(marker)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:max(cut, 0)] + marker
}

// Log is the open audit file. A nil *Log records nothing.
type Log struct {
	opts Options
	now  func() time.Time

	mu     sync.Mutex
	dir    *os.File // the log's directory: every name is opened in it
	name   string   // the live file's name in dir
	f      *os.File
	size   int64
	closed bool
	// retryAt is when a rotation that failed is tried again: until then
	// lines go on into the file it could not rotate.
	retryAt time.Time
	budgets budgets
	// observe hears every entry (Observe), written or left out.
	observe atomic.Pointer[func(Entry)]
}

// Observe has f hear every entry recorded from now on, before its
// caller's budget is spent (a line left out is heard too), with no lock
// of the log's held: the metrics count the actions so. f must be quick
// and must not record. A nil f hears nothing more.
func (l *Log) Observe(f func(Entry)) {
	if l == nil {
		return
	}
	if f == nil {
		l.observe.Store(nil)
		return
	}
	l.observe.Store(&f)
}

// Open opens (making it and its directory if needed) the log at path,
// with the default bounds.
func Open(path string) (*Log, error) { return OpenWith(path, Options{}) }

// OpenWith opens the log at path with opts (zero fields: the defaults).
func OpenWith(path string, opts Options) (*Log, error) {
	opts = opts.withDefaults()
	if opts.Keep < 2 {
		return nil, fmt.Errorf("opening the audit log %s: keep %d files: want at least 2 (the live one and one rotated)", path, opts.Keep)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("opening the audit log: %w", err)
	}
	dir, err := openDir(filepath.Dir(path))
	if err != nil {
		return nil, err
	}
	l := &Log{opts: opts, now: time.Now, dir: dir, name: filepath.Base(path)}
	l.budgets.init()
	if l.f, l.size, err = l.openLive(false); err != nil {
		dir.Close()
		return nil, err
	}
	return l, nil
}

// Record appends e (its time set now if zero) and syncs it to disk, or,
// past its caller's budget, counts it for the caller's next LeftOut line.
// A line left out is no error.
func (l *Log) Record(e Entry) error {
	if l == nil {
		return nil
	}
	now := l.now()
	if e.Time.IsZero() {
		e.Time = now.UTC()
	}
	field := MaxField
	if e.Refused {
		field = RefusedField
	}
	e.Command = Truncate(e.Command, field)
	e.Error = Truncate(e.Error, field)
	if f := l.observe.Load(); f != nil {
		(*f)(e)
	}
	line, err := marshal(e)
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return fmt.Errorf("writing the audit log: %w", os.ErrClosed)
	}
	if !l.budgets.spend(l, e, len(line), now) {
		return nil
	}
	return l.write(line, now)
}

func marshal(e Entry) ([]byte, error) {
	line, err := json.Marshal(e)
	if err != nil {
		return nil, fmt.Errorf("encoding an audit line: %w", err)
	}
	// encoding/json leaves DEL, C1 and bidi controls raw: a sandbox-made
	// name must not reach an admin's terminal through `cat audit.log`.
	return append(termsafe.JSON(line), '\n'), nil
}

// write appends line whole and syncs it, rotating first when the line
// would take the live file past its size. l.mu is held.
func (l *Log) write(line []byte, now time.Time) error {
	var rerr error
	if l.size > 0 && l.size+int64(len(line)) > l.opts.MaxSize && !now.Before(l.retryAt) {
		if rerr = l.rotate(); rerr != nil {
			// The line goes on into the file it could not rotate: a
			// line lost is worse than a file too large.
			l.retryAt = now.Add(time.Minute)
		}
	}
	n, err := l.f.Write(line)
	l.size += int64(n)
	if err != nil {
		return errors.Join(rerr, fmt.Errorf("writing the audit log: %w", err))
	}
	if err := l.f.Sync(); err != nil {
		return errors.Join(rerr, fmt.Errorf("syncing the audit log: %w", err))
	}
	return rerr
}

// Close writes the LeftOut lines of what budgets held back, and closes
// the file.
func (l *Log) Close() error {
	if l == nil {
		return nil
	}
	ferr := l.FlushLeftOut()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	l.budgets.stop()
	return errors.Join(ferr, l.f.Close(), l.dir.Close())
}
