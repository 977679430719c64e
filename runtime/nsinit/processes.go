package nsinit

import (
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/sandboxd/sandboxd/runtime/nsinit/proclog"
)

// Background processes: commands that outlive the call that started them
// (Request.Spawn). The init keeps them, their output and how they ended,
// so that they run on while the daemon restarts or its caller goes, and
// the daemon asks it (ListProcesses, ReadLog, SignalProcess) and hears of
// their ends on a watch connection.
//
// Each one's stdout and stderr go, through a pipe the init reads, to a
// log in a directory of the system layer's volume, outside the overlay
// (the sandbox cannot see or change it; its disk quota counts it),
// rotated at LogBound: the current file and the one before are kept
// (runtime/nsinit/proclog).

// maxProcesses bounds the processes the init keeps: running ones count,
// and ended ones are forgotten (with their logs), oldest first, to make
// room.
const maxProcesses = 64

// Process is a background process as the init reports it.
type Process struct {
	ID      string    `json:"id"`
	Argv    []string  `json:"argv"`
	PID     int       `json:"pid"`
	Started time.Time `json:"started"`
	Ended   time.Time `json:"ended,omitzero"`
	// Result is how it ended; How is "" while it runs.
	Result Result `json:"result"`
}

// Running reports whether the process has not ended.
func (p Process) Running() bool { return p.Ended.IsZero() }

// ProcessQuery asks the init about its background processes: one of List,
// Read, Signal or Watch.
type ProcessQuery struct {
	List   bool   `json:"list,omitempty"`
	Watch  bool   `json:"watch,omitempty"`
	ID     string `json:"id,omitempty"`
	Signal int    `json:"signal,omitempty"`
	// Read: Max bytes of ID's log from Offset (bytes since it started).
	Read   bool   `json:"read,omitempty"`
	Offset uint64 `json:"offset,omitempty"`
	Max    uint32 `json:"max,omitempty"`
}

// LogChunk is what a read of a log returns (a background process's log
// is runtime/nsinit/proclog's; the daemon names its reads, its bound and
// its error here).
type LogChunk = proclog.Chunk

const (
	// LogBound is the size at which a process's log is rotated: at most
	// twice it is kept.
	LogBound = proclog.Bound
	// MaxReadLog bounds what one ReadLog returns.
	MaxReadLog = proclog.MaxRead
)

// Errors of the processes' calls.
var (
	// ErrNoProcess: no background process of that id.
	ErrNoProcess = errors.New("no such process")
	// ErrTooMany: maxProcesses run already.
	ErrTooMany = errors.New("too many background processes")
	// ErrPastEnd: a read of a log from past what it holds.
	ErrPastEnd = proclog.ErrPastEnd
)

// processes is the init's table of background processes.
type processes struct {
	dir *os.File // the logs' directory; nil: none could be made
	mu  sync.Mutex
	all []*process // oldest first
	// watchers hear of each end.
	watchers map[*net.UnixConn]bool
}

type process struct {
	Process
	log *proclog.Log
	// reaped: its pid is no longer its own (it may be reused), though its
	// end is not told until its log is all written.
	reaped bool
}

func newProcesses(dir *os.File) *processes {
	return &processes{dir: dir, watchers: map[*net.UnixConn]bool{}}
}

// add makes room for and registers a process about to start, with a new
// log; it returns the log's write end, for the command's stdout and
// stderr.
func (ps *processes) add(id string, argv []string) (*process, *os.File, error) {
	if ps.dir == nil {
		return nil, nil, errors.New("background processes are not available in this sandbox")
	}
	if id == "" || len(id) > 64 || !validID(id) {
		return nil, nil, fmt.Errorf("process id %q: letters and digits, at most 64", id)
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if slices.ContainsFunc(ps.all, func(p *process) bool { return p.ID == id }) {
		return nil, nil, fmt.Errorf("process id %q is taken", id)
	}
	if len(ps.all) >= maxProcesses {
		i := slices.IndexFunc(ps.all, func(p *process) bool { return !p.Running() })
		if i < 0 {
			return nil, nil, fmt.Errorf("%d run already: %w", maxProcesses, ErrTooMany)
		}
		ps.all[i].log.Remove()
		ps.all = slices.Delete(ps.all, i, i+1)
	}
	log, err := proclog.New(ps.dir, id)
	if err != nil {
		return nil, nil, err
	}
	r, w, err := os.Pipe()
	if err != nil {
		log.Remove()
		return nil, nil, fmt.Errorf("making the output pipe: %w", err)
	}
	p := &process{Process: Process{ID: id, Argv: argv, Started: time.Now()}, log: log}
	ps.all = append(ps.all, p)
	go log.CopyFrom(r)
	return p, w, nil
}

func validID(id string) bool {
	for _, c := range id {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// forget drops a process that did not start.
func (ps *processes) forget(p *process) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.all = slices.DeleteFunc(ps.all, func(q *process) bool { return q == p })
	p.log.Remove()
}

// started records the pid; ended, how it ended, and tells the watchers
// once its output is all in the log.
func (ps *processes) started(p *process, pid int) {
	ps.mu.Lock()
	p.PID = pid
	ps.mu.Unlock()
}

func (ps *processes) ended(p *process, res Result) {
	ps.mu.Lock()
	p.reaped = true
	ps.mu.Unlock()
	p.log.Wait()
	ps.mu.Lock()
	p.Ended, p.Result = time.Now(), res
	snap := p.Process
	snap.Argv = nil // the event is small; a list has the rest
	var ws []*net.UnixConn
	for c := range ps.watchers {
		ws = append(ws, c)
	}
	ps.mu.Unlock()
	for _, c := range ws {
		if writeMessage(c, message{Exited: &snap}, nil) != nil {
			ps.unwatch(c)
		}
	}
}

func (ps *processes) list() []Process {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	out := make([]Process, len(ps.all))
	for i, p := range ps.all {
		out[i] = p.Process
	}
	return out
}

func (ps *processes) get(id string) (*process, error) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for _, p := range ps.all {
		if p.ID == id {
			return p, nil
		}
	}
	return nil, fmt.Errorf("process %q: %w", id, ErrNoProcess)
}

func (ps *processes) unwatch(c *net.UnixConn) {
	ps.mu.Lock()
	delete(ps.watchers, c)
	ps.mu.Unlock()
	c.Close()
}

// query answers one ProcessQuery on conn; a watch keeps conn until the
// daemon goes.
func (s *server) query(conn *net.UnixConn, q *ProcessQuery) {
	ps := s.procs
	switch {
	case q.List:
		_ = writeMessage(conn, message{Processes: ps.list(), Listed: true}, nil)
	case q.Watch:
		ps.mu.Lock()
		ps.watchers[conn] = true
		ps.mu.Unlock()
		_ = writeMessage(conn, message{Listed: true}, nil)
		for { // until the daemon hangs up
			m, files, err := readMessage(conn, smallMessage)
			closeAll(files)
			if err != nil || m.Process == nil {
				ps.unwatch(conn)
				return
			}
		}
	case q.Read:
		p, err := ps.get(q.ID)
		if err != nil {
			_ = writeMessage(conn, errorMessage(err), nil)
			return
		}
		ps.mu.Lock()
		ended := !p.Running()
		ps.mu.Unlock()
		chunk, err := p.log.Read(q.Offset, min(q.Max, MaxReadLog))
		if err != nil {
			_ = writeMessage(conn, errorMessage(err), nil)
			return
		}
		chunk.Ended = ended && chunk.Next == p.log.Size()
		_ = writeMessage(conn, message{Log: &chunk}, nil)
	case q.Signal > 0:
		p, err := ps.get(q.ID)
		if err == nil {
			ps.mu.Lock()
			if p.PID > 0 && !p.reaped {
				err = syscall.Kill(-p.PID, syscall.Signal(q.Signal))
			}
			ps.mu.Unlock()
		}
		if err != nil {
			_ = writeMessage(conn, errorMessage(fmt.Errorf("signalling process %q: %w", q.ID, err)), nil)
			return
		}
		_ = writeMessage(conn, message{Listed: true}, nil)
	default:
		_ = writeMessage(conn, message{Error: "an empty process query"}, nil)
	}
}

// spawn starts req in the background: its stdin /dev/null, its output to
// its log; it answers with the pid, and the process goes on without the
// connection.
func (s *server) spawn(conn *net.UnixConn, req *Request, files []*os.File) {
	stdio, cg, err := splitFiles(req, files)
	closeAll(stdio) // a background process takes none of the caller's
	if err != nil {
		_ = writeMessage(conn, errorMessage(err), nil)
		return
	}
	p, w, err := s.procs.add(req.Spawn, req.Argv)
	if err != nil {
		if cg != nil {
			cg.Close()
		}
		_ = writeMessage(conn, errorMessage(err), nil)
		return
	}
	null, err := os.Open("/dev/null")
	if err != nil {
		w.Close()
		s.procs.forget(p)
		if cg != nil {
			cg.Close()
		}
		_ = writeMessage(conn, errorMessage(err), nil)
		return
	}
	req.PTY, req.OutputLimit = false, 0
	cmd, err := s.start(req, []*os.File{null, w, w}, cg)
	null.Close()
	w.Close() // the process has its own copies
	if err != nil {
		s.procs.forget(p)
		_ = writeMessage(conn, errorMessage(err), nil)
		return
	}
	pid := int(cmd.pid.Load())
	s.procs.started(p, pid)
	_ = writeMessage(conn, message{Started: pid}, nil)
	go func() { s.procs.ended(p, cmd.wait()) }()
}
