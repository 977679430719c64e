package nsinit

// The threads that fork commands: each locked to its goroutine for good
// and set up once (joined to a booted sandbox's systemd, its credentials
// taken, its filter installed), since a fork's child starts with the
// credentials of the thread that forked it.

import (
	"fmt"
	"runtime"
	"sync"
	"syscall"

	"github.com/sandboxd/sandboxd/runtime/nsinit/creds"
	"github.com/sandboxd/sandboxd/runtime/seccomp"
)

// fork is a request to the forker thread.
type fork struct {
	path string
	argv []string
	attr *syscall.ProcAttr
	done chan forked
}

type forked struct {
	pid int
	err error
}

// startForker starts the one thread that forks commands, locked down
// (lockdown) before its first fork: a fork's child starts with the
// credentials of the thread that forked it.
func (s *server) startForker() error {
	if s.system == nil {
		return forkerThread(lockdown, s.forks)
	}
	s.asCaller.setup = s.threadSetup
	return forkerThread(s.threadSetup(true, creds.DropCapabilities), s.forks)
}

// threadSetup is what a forker thread does before its first fork: join
// the sandbox's systemd (if joined and it has one), take on its
// credentials (become), and take the filter. Without a systemd the
// filter is the whole init's already (lockdown, on the main forker).
func (s *server) threadSetup(joined bool, become func() error) func() error {
	if s.system == nil {
		return become
	}
	return func() error {
		if joined {
			if err := s.system.Join(); err != nil {
				return err
			}
		}
		if err := become(); err != nil {
			return err
		}
		return seccomp.InstallThread()
	}
}

// forkFor forks f: on the thread of the command's identity (asCaller:
// uid 0 without capabilities), or the main forker, or, once the
// sandbox's systemd has ended, in the init's own namespaces.
func (s *server) forkFor(f fork, asCaller bool, id creds.Identity) forked {
	joined := s.system == nil || !s.system.Ended.Load()
	if asCaller {
		return s.asCaller.fork(id, joined, f)
	}
	if !joined {
		s.fallback.once.Do(func() {
			s.fallback.forks = make(chan fork)
			s.fallback.err = forkerThread(s.threadSetup(false, creds.DropCapabilities), s.fallback.forks)
		})
		if s.fallback.err != nil {
			return forked{-1, s.fallback.err}
		}
		s.fallback.forks <- f
		return <-f.done
	}
	s.forks <- f
	return <-f.done
}

// forkerThread starts a thread, kept for good and locked to its goroutine
// (its credentials are not the others'), that runs setup and then forks
// what arrives on forks; it returns setup's error.
func forkerThread(setup func() error, forks <-chan fork) error {
	ready := make(chan error)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with it
		if err := setup(); err != nil {
			ready <- err
			return
		}
		close(ready)
		for f := range forks {
			pid, err := syscall.ForkExec(f.path, f.argv, f.attr)
			f.done <- forked{pid, err}
		}
	}()
	return <-ready
}

// forkersAsCaller are the threads that fork the commands of uid 0 with no
// capability, one a distinct identity (root's gid and groups), each made
// once and kept: a plain command of uid 0 must start with no capability,
// which the forker thread, root with a root command's capabilities,
// cannot give, and a thread made for each command costs milliseconds.
type forkersAsCaller struct {
	mu sync.Mutex
	by map[string]chan fork
	// setup wraps what a new thread does (see server.threadSetup).
	setup func(joined bool, become func() error) func() error
}

// fork forks f on the thread of id (joined: in a booted sandbox's
// systemd's namespaces), which it starts the first time.
func (fs *forkersAsCaller) fork(id creds.Identity, joined bool, f fork) forked {
	key := fmt.Sprint(id, joined)
	fs.mu.Lock()
	forks, ok := fs.by[key]
	if !ok {
		forks = make(chan fork)
		setup := func() error { return creds.BecomeOnThisThread(id) }
		if fs.setup != nil {
			setup = fs.setup(joined, setup)
		}
		if err := forkerThread(setup, forks); err != nil {
			fs.mu.Unlock()
			return forked{-1, err}
		}
		if fs.by == nil {
			fs.by = map[string]chan fork{}
		}
		fs.by[key] = forks
	}
	fs.mu.Unlock()
	forks <- f
	return <-f.done
}
