// Package reaper collects the exits of processes a program started but
// does not wait for one by one: the sandboxes' inits, which outlive the
// calls that launched them.
package reaper

import (
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"
)

// Reaper collects the exit of the sandboxes' init processes. A goroutine
// blocked in Wait per init would hold an OS thread each (200 sandboxes,
// 200 threads); instead one goroutine, woken by SIGCHLD (and every few
// seconds in case a signal was merged), polls only the pids it was given,
// so that exec.Cmd.Wait of the daemon's other children is not disturbed.
type Reaper struct {
	mu   sync.Mutex
	pids map[int]bool
	once sync.Once
}

// Add has pid collected when it ends.
func (r *Reaper) Add(pid int) {
	r.once.Do(func() {
		r.pids = map[int]bool{}
		go r.run()
	})
	r.mu.Lock()
	r.pids[pid] = true
	r.mu.Unlock()
}

func (r *Reaper) run() {
	sig := make(chan os.Signal, 16)
	signal.Notify(sig, syscall.SIGCHLD)
	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-sig:
		case <-tick.C:
		}
		r.reap()
	}
}

func (r *Reaper) reap() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for pid := range r.pids {
		var ws syscall.WaitStatus
		got, err := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
		if got == pid || err == syscall.ECHILD {
			delete(r.pids, pid)
		}
	}
}
