// Package audit is sandboxd's append-only record of every state-changing
// action: who (the caller's uid, or the daemon itself), what, to which
// sandbox, and how it ended. One JSON object per line, each written whole
// with one write(2) on a file opened O_APPEND and synced before the call
// returns, so lines never interleave or tear and survive a crash.
package audit

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
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
	Result    string  `json:"result"` // "ok" or "error"
	Error     string  `json:"error,omitempty"`
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
	mu sync.Mutex
	f  *os.File
}

// Open opens (making it and its directory if needed) the log at path.
func Open(path string) (*Log, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("opening the audit log: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening the audit log: %w", err)
	}
	return &Log{f: f}, nil
}

// Record appends e (its time set now if zero) and syncs it to disk.
func (l *Log) Record(e Entry) error {
	if l == nil {
		return nil
	}
	if e.Time.IsZero() {
		e.Time = time.Now().UTC()
	}
	e.Command = Truncate(e.Command, MaxField)
	e.Error = Truncate(e.Error, MaxField)
	line, err := json.Marshal(e)
	if err != nil {
		return err
	}
	// encoding/json leaves DEL, C1 and bidi controls raw: a sandbox-made
	// name must not reach an admin's terminal through `cat audit.log`.
	line = append(termsafe.JSON(line), '\n')
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, err := l.f.Write(line); err != nil {
		return fmt.Errorf("writing the audit log: %w", err)
	}
	if err := l.f.Sync(); err != nil {
		return fmt.Errorf("syncing the audit log: %w", err)
	}
	return nil
}

// Close closes the file.
func (l *Log) Close() error {
	if l == nil {
		return nil
	}
	return l.f.Close()
}
