package pool

import (
	"fmt"
	"sync"

	"github.com/sandboxd/sandboxd/cowfs/changewatch"
	"golang.org/x/sys/unix"
)

// Watch is Changes over fanotify (cowfs/changewatch): one filesystem
// mark on the pool's filesystem, each project's events told apart by its
// subvolume.
type Watch struct {
	w *changewatch.Watcher

	mu       sync.Mutex
	projects map[string]*changewatch.Project // by directory
	stop     int                             // an eventfd that ends drain
	ended    chan struct{}
}

// NewWatch watches the filesystem holding dir (the pool's root). It
// fails where fanotify cannot tell the projects apart (zfs-fuse: no file
// handles); pools are off then.
func NewWatch(dir string) (*Watch, error) {
	w, err := changewatch.NewWatcher(dir)
	if err != nil {
		return nil, fmt.Errorf("watching the pool's filesystem for the warm pools: %w", err)
	}
	stop, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("watching the pool's filesystem for the warm pools: eventfd: %w", err)
	}
	x := &Watch{w: w, projects: map[string]*changewatch.Project{}, stop: stop, ended: make(chan struct{})}
	go x.drain()
	return x, nil
}

// drain reads the queue as events come, so that the sandboxes' writes do
// not overflow it between marks (an overflow spoils every mark).
func (x *Watch) drain() {
	defer close(x.ended)
	fds := []unix.PollFd{{Fd: int32(x.w.FD()), Events: unix.POLLIN}, {Fd: int32(x.stop), Events: unix.POLLIN}}
	for {
		_, err := unix.Poll(fds, -1)
		if err == unix.EINTR {
			continue
		}
		if err != nil || fds[1].Revents != 0 || x.w.Drain() != nil {
			return // closed
		}
	}
}

type mark struct {
	p *changewatch.Project
	m changewatch.Mark
}

// Mark is Changes.Mark: the project's writers are a refusal (a shared
// mapping writes without events).
func (x *Watch) Mark(dir string) (Mark, error) {
	p, err := x.project(dir)
	if err != nil {
		return nil, err
	}
	m, err := x.w.Begin(p)
	if err != nil {
		return nil, fmt.Errorf("marking project %s: %w", dir, err)
	}
	if s := m.Suspect(); len(s) > 0 {
		// How many, not who: ListPools shows it to the pool's owner, and
		// the writers may be other users' processes.
		return nil, fmt.Errorf("project %s has files open for writing (%d descriptors or mappings): a pool waits until they are closed", dir, len(s))
	}
	return mark{p, m}, nil
}

// Unchanged is Changes.Unchanged.
func (x *Watch) Unchanged(m Mark) bool {
	mk, ok := m.(mark)
	if !ok {
		return false
	}
	same, err := x.w.Unchanged(mk.p, mk.m)
	return err == nil && same
}

// project is the watched project at dir, watched again if its volume is
// another since (a promotion swaps it: its subvolume id changes).
func (x *Watch) project(dir string) (*changewatch.Project, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if p := x.projects[dir]; p != nil {
		if same, err := p.Same(); err == nil && same {
			return p, nil
		}
		x.w.Unwatch(p)
	}
	p, err := x.w.Watch(dir)
	if err != nil {
		return nil, err
	}
	x.projects[dir] = p
	return p, nil
}

// Close ends the watch.
func (x *Watch) Close() error {
	_, _ = unix.Write(x.stop, []byte{1, 0, 0, 0, 0, 0, 0, 0})
	<-x.ended
	unix.Close(x.stop)
	return x.w.Close()
}
