// Package proclog is a background process's log, as its init writes it:
// the process's stdout and stderr, through a pipe the init reads, in a
// directory of the system layer's volume outside the overlay (the
// sandbox cannot see or change it; its disk quota counts it), rotated at
// Bound: the current file (ID.log) and the one before (ID.log.1) are
// kept, and reads go by offset since the process started.
package proclog

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Bound is the size at which a process's log is rotated: at most twice
// it is kept.
const Bound = 8 << 20

// MaxRead bounds what one Read returns (nsinit.ReadLog's).
const MaxRead = 64 << 10

// Chunk is what a read of a log returns: Data from the offset asked
// (or from the oldest byte kept, if that is later: From says), Next the
// offset after it, Ended once the process has ended and Next is the end.
type Chunk struct {
	Data  []byte `json:"data"`
	From  uint64 `json:"from"`
	Next  uint64 `json:"next"`
	Ended bool   `json:"ended"`
}

// ErrPastEnd: a read of a log from past what it holds.
var ErrPastEnd = errors.New("offset past the end of the log")

// Log is one process's output: the current file (ID.log) and the
// one before it (ID.log.1); offsets count every byte written since the
// start.
type Log struct {
	dir  *os.File
	name string
	mu   sync.Mutex
	cur  *os.File
	// base is the offset of the first byte kept (in .1, or in the
	// current file when there is no .1), prev the size of .1, total
	// every byte written.
	base, prev, total uint64
	done              chan struct{}
}

// New makes process id's log in dir, empty.
func New(dir *os.File, id string) (*Log, error) {
	l := &Log{dir: dir, name: id + ".log", done: make(chan struct{})}
	f, err := l.create(l.name)
	if err != nil {
		return nil, err
	}
	l.cur = f
	return l, nil
}

func (l *Log) create(name string) (*os.File, error) {
	fd, err := unix.Openat(int(l.dir.Fd()), name, unix.O_RDWR|unix.O_CREAT|unix.O_TRUNC|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("making the log %s: %w", name, err)
	}
	return os.NewFile(uintptr(fd), name), nil
}

// CopyFrom writes what r gives into the log until r ends.
func (l *Log) CopyFrom(r *os.File) {
	defer close(l.done)
	defer r.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			l.write(buf[:n])
		}
		if err != nil {
			return
		}
	}
}

func (l *Log) write(b []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.total-l.base-l.prev+uint64(len(b)) > Bound && l.total-l.base-l.prev > 0 {
		// Rotate: the current becomes .1, the old .1 goes.
		if err := unix.Renameat(int(l.dir.Fd()), l.name, int(l.dir.Fd()), l.name+".1"); err == nil {
			if f, err := l.create(l.name); err == nil {
				l.cur.Close()
				l.cur = f
				l.base += l.prev
				l.prev = l.total - l.base
			}
		}
	}
	if _, err := l.cur.Write(b); err != nil {
		return // the quota or the disk is full: what does not fit is lost
	}
	l.total += uint64(len(b))
}

// Wait returns once the output is all written (the pipe's writers gone).
func (l *Log) Wait() {
	select {
	case <-l.done:
	case <-time.After(time.Second): // a daemon it started holds the pipe
	}
}

// Size is every byte written since the start.
func (l *Log) Size() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.total
}

// Read returns at most limit bytes from offset (or from the oldest kept).
func (l *Log) Read(offset uint64, limit uint32) (Chunk, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if offset > l.total {
		return Chunk{}, fmt.Errorf("offset %d, the log holds %d bytes: %w", offset, l.total, ErrPastEnd)
	}
	offset = max(offset, l.base)
	c := Chunk{From: offset, Next: offset}
	for len(c.Data) < int(limit) && c.Next < l.total {
		name, at := l.name, c.Next-(l.base+l.prev)
		if c.Next < l.base+l.prev {
			name, at = l.name+".1", c.Next-l.base
		}
		fd, err := unix.Openat(int(l.dir.Fd()), name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return c, fmt.Errorf("reading the log: %w", err)
		}
		buf := make([]byte, int(limit)-len(c.Data))
		n, err := unix.Pread(fd, buf, int64(at))
		unix.Close(fd)
		if err != nil && !errors.Is(err, io.EOF) {
			return c, fmt.Errorf("reading the log: %w", err)
		}
		if n <= 0 {
			break
		}
		c.Data = append(c.Data, buf[:n]...)
		c.Next += uint64(n)
	}
	return c, nil
}

// Remove deletes the log's files.
func (l *Log) Remove() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cur.Close()
	for _, n := range []string{l.name, l.name + ".1"} {
		_ = unix.Unlinkat(int(l.dir.Fd()), n, 0)
	}
}
