// Package pidwatch tells when a process ends, by its pidfd: the sandboxes'
// inits, the daemon's children or found again after a restart.
//
// Each watched process is a pidfd (pidfd_open) in the Go runtime's poller:
// it becomes readable when the process ends. No signal, no polling of the
// pids one by one, and no thread per process (a goroutine parked in the
// poller holds none); unlike kill(pid, 0), a pidfd cannot mistake a
// process that took the number since for the one watched.
package pidwatch

import (
	"fmt"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// Process is a watched process.
type Process struct {
	done  chan struct{}
	once  sync.Once
	ended bool // set before done is closed, when the process ended
	f     *os.File
	child bool
}

// Watch watches process pid from now: it must be the process meant, a
// child not yet waited for (its number cannot be taken while it is a
// zombie), or one just found alive by a means that names it. A child
// (child) is reaped once it ends: nothing else may wait for it.
func Watch(pid int, child bool) (*Process, error) {
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("watching process %d: pidfd_open: %w", pid, err)
	}
	p := &Process{done: make(chan struct{}), f: os.NewFile(uintptr(fd), fmt.Sprintf("pidfd:%d", pid)), child: child}
	rc, err := p.f.SyscallConn()
	if err != nil {
		p.f.Close()
		return nil, fmt.Errorf("watching process %d: %w", pid, err)
	}
	go func() {
		// Read calls the function, and waits for the pidfd to be readable
		// whenever it says false; a Stop's Close ends the wait (an error).
		err := rc.Read(func(fd uintptr) bool {
			ready := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
			if n, _ := unix.Poll(ready, 0); n < 1 {
				return false
			}
			if p.child {
				var info unix.Siginfo
				_ = unix.Waitid(unix.P_PIDFD, int(fd), &info, unix.WEXITED, nil)
			}
			return true
		})
		if err == nil {
			p.end(true)
			if p.child {
				p.f.Close() // Stop leaves a child's open, to reap it
			}
		}
	}()
	return p, nil
}

// end closes done, once; ended says the process ended.
func (p *Process) end(ended bool) {
	p.once.Do(func() {
		p.ended = ended
		close(p.done)
		if !p.child {
			p.f.Close()
		}
	})
}

// Done is closed once the process ended (and, a child, was reaped), or
// the watch was stopped.
func (p *Process) Done() <-chan struct{} { return p.done }

// Ended reports whether the process ended (and, a child, was reaped).
func (p *Process) Ended() bool {
	select {
	case <-p.done:
		return p.ended
	default:
		return false
	}
}

// Stop ends the watch: Done is closed, Ended says false. A child is still
// reaped when it ends.
func (p *Process) Stop() { p.end(false) }
