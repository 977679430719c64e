package nsinit

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/runtime/nsinit/boot"
	"github.com/sandboxd/sandboxd/runtime/nsinit/cgroup"
	"github.com/sandboxd/sandboxd/runtime/nsinit/creds"
)

// server runs commands for the daemon. As pid 1 of the sandbox's PID
// namespace it also reaps every orphan there.
type server struct {
	// mu is held from fork to registration, so that the reaper cannot
	// take a command's exit for an orphan's.
	mu      sync.Mutex
	waiting map[int]chan syscall.WaitStatus
	forks   chan fork
	// asCaller forks the commands of uid 0 that did not ask for root.
	asCaller forkersAsCaller
	// procs are the background processes (nil: none, in tests).
	procs *processes
	// system is a booted sandbox's systemd (nil: none). Forker threads
	// join its namespaces, each with a filter of its own (the init's
	// other threads must still setns); once it has ended, fallback forks
	// in the init's own namespaces.
	system   *boot.System
	fallback struct {
		once  sync.Once
		forks chan fork
		err   error
	}
}

func newServer() *server {
	return &server{waiting: map[int]chan syscall.WaitStatus{}, forks: make(chan fork)}
}

// reap collects every child that ends, and hands the commands' statuses
// to whoever waits for them.
func (s *server) reap() {
	sig := make(chan os.Signal, 32)
	signal.Notify(sig, syscall.SIGCHLD)
	tick := time.NewTicker(5 * time.Second) // in case signals were merged
	for {
		select {
		case <-sig:
		case <-tick.C:
		}
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
			s.mu.Lock()
			if ch, ok := s.waiting[pid]; ok {
				ch <- ws
				delete(s.waiting, pid)
			}
			s.mu.Unlock()
		}
	}
}

func (s *server) serve(ln *net.UnixListener) {
	for {
		conn, err := ln.AcceptUnix()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		go s.handle(conn)
	}
}

// handle serves one command: a request (with its stdio), the answer
// "started", later the exit; meanwhile the daemon may send signals.
func (s *server) handle(conn *net.UnixConn) {
	defer conn.Close()
	msg, files, err := readMessage(conn, maxMessage)
	if err == nil && msg.Process != nil && s.procs != nil {
		closeAll(files)
		s.query(conn, msg.Process)
		return
	}
	if err == nil && msg.FileRequest != nil {
		s.serveFile(conn, msg.FileRequest, files)
		return
	}
	if err == nil && msg.Request != nil && msg.Request.Spawn != "" && s.procs != nil {
		s.spawn(conn, msg.Request, files)
		return
	}
	if err != nil || msg.Request == nil {
		closeAll(files)
		_ = writeMessage(conn, message{Error: "expected a request"}, nil)
		return
	}
	stdio, cg, err := splitFiles(msg.Request, files)
	if err != nil {
		closeAll(files)
		_ = writeMessage(conn, errorMessage(err), nil)
		return
	}
	cmd, err := s.start(msg.Request, stdio, cg)
	closeAll(stdio) // the command has its own copies
	if err != nil {
		_ = writeMessage(conn, errorMessage(err), nil)
		return
	}
	var pass []*os.File
	if cmd.master != nil {
		pass = []*os.File{cmd.master}
	}
	err = writeMessage(conn, message{Started: int(cmd.pid.Load())}, pass)
	if cmd.master != nil {
		cmd.master.Close()
	}
	if err != nil {
		cmd.kill(syscall.SIGKILL) // no one will hear of it
	}
	go func() {
		for {
			m, extra, err := readMessage(conn, smallMessage)
			closeAll(extra)
			if err != nil {
				return // the daemon went away: the command goes on
			}
			if m.Signal > 0 {
				cmd.kill(syscall.Signal(m.Signal))
			}
		}
	}()
	res := cmd.wait()
	_ = writeMessage(conn, message{Exit: &res}, nil)
}

// command is one started command.
type command struct {
	pid    atomic.Int64 // 0 until the fork returns
	master *os.File     // the pty's master, handed to the caller
	status chan syscall.WaitStatus
	copies sync.WaitGroup // output being counted
	// readers are the output pipes' read ends, closed once the command
	// has ended: a process that left its group may still hold the write
	// ends.
	readers []*os.File
	ended   atomic.Value // a How that ended it early, set once
	timer   *time.Timer
	// cg is the command's own cgroup (nil: none, as the caller asked to
	// detach, or as the host has no cgroup v2).
	cg *cgroup.Received
}

func (c *command) kill(sig syscall.Signal) {
	// Its own session and process group: this reaches what it started
	// too, unless that left the group. (kill(-0) would be the init's.)
	if pid := int(c.pid.Load()); pid > 0 {
		_ = syscall.Kill(-pid, sig)
	}
}

func (c *command) end(how string) {
	if c.ended.CompareAndSwap(nil, how) {
		c.kill(syscall.SIGKILL)
	}
}

func (c *command) wait() Result {
	ws := <-c.status
	if c.timer != nil {
		c.timer.Stop()
	}
	// A command ends with its process group: what it left running in the
	// background (a fork bomb's children) goes too; and with its cgroup,
	// what left the group (setsid) and would keep the caller's streams.
	// Without a cgroup (detached), daemons it started stay.
	c.kill(syscall.SIGKILL)
	if c.cg != nil {
		c.cg.Kill()
		c.cg.Close()
	}
	copied := make(chan struct{})
	go func() { c.copies.Wait(); close(copied) }()
	select {
	case <-copied:
	case <-time.After(time.Second): // a daemon holds the output: stop counting it
		closeAll(c.readers)
		<-copied
	}
	res := Result{How: Exited, Code: ws.ExitStatus()}
	if ws.Signaled() {
		res = Result{How: Signaled, Signal: int(ws.Signal())}
	}
	if how, ok := c.ended.Load().(string); ok {
		res.How = how
	}
	return res
}

// splitFiles takes a request's descriptors apart: stdio, then the
// cgroups the request says it carries.
func splitFiles(req *Request, files []*os.File) ([]*os.File, *cgroup.Received, error) {
	if !req.Cgroup {
		return files, nil, nil
	}
	if len(files) < cgroup.Files {
		return nil, nil, errors.New("the request's cgroups are missing")
	}
	n := len(files) - cgroup.Files
	return files[:n], cgroup.FromFiles(files[n:]), nil
}

func (s *server) start(req *Request, stdio []*os.File, cg *cgroup.Received) (_ *command, err error) {
	defer func() {
		if err != nil && cg != nil {
			cg.Close()
		}
	}()
	if len(req.Argv) == 0 || req.Argv[0] == "" {
		return nil, errors.New("no command given")
	}
	dir := req.Dir
	if dir == "" {
		dir = "/"
	}
	// The program is looked for as the command's user would: a
	// directory of PATH it cannot enter hides what is in it.
	var path string
	var lerr error
	if err := creds.AsCaller(req.identity(), func() { path, lerr = lookPath(req.Argv[0], dir, req.Env) }); err != nil {
		return nil, fmt.Errorf("looking for %s: %w", req.Argv[0], err)
	}
	if lerr != nil {
		return nil, lerr
	}
	if err := CheckStdio(stdio); err != nil {
		return nil, err
	}
	if req.Home != "" {
		if err := makeHome(req.Home, req.UID, req.GID); err != nil {
			return nil, err
		}
	}
	c := &command{status: make(chan syscall.WaitStatus, 1)}
	sys := &syscall.SysProcAttr{
		Setsid:     true,
		Credential: &syscall.Credential{Uid: req.UID, Gid: req.GID, Groups: req.Groups},
	}
	var files []uintptr
	var closeAfter []*os.File
	defer func() { closeAll(closeAfter) }()
	switch {
	case req.PTY:
		master, slave, err := openPTY(req.Rows, req.Cols, req.UID)
		if err != nil {
			return nil, err
		}
		c.master = master
		closeAfter = append(closeAfter, slave)
		files = []uintptr{slave.Fd(), slave.Fd(), slave.Fd()}
		sys.Setctty, sys.Ctty = true, 0
	case len(stdio) == 3:
		files = []uintptr{stdio[0].Fd(), stdio[1].Fd(), stdio[2].Fd()}
		if req.OutputLimit > 0 {
			w, err := c.countOutput(stdio[1:], req.OutputLimit, req.identity())
			if err != nil {
				return nil, err
			}
			closeAfter = append(closeAfter, w...)
			files[1], files[2] = w[0].Fd(), w[1].Fd()
		}
	default:
		return nil, fmt.Errorf("expected 3 file descriptors (stdin, stdout, stderr), got %d", len(stdio))
	}
	s.mu.Lock()
	if cg != nil {
		if cerr := cg.Enter(); cerr != nil {
			fmt.Fprintf(os.Stderr, "sandbox init: %v; %s runs without a cgroup of its own\n", cerr, path)
			cg.Close()
			cg = nil
		}
	}
	f := fork{path: path, argv: req.Argv, attr: &syscall.ProcAttr{Dir: dir, Env: req.Env, Files: files, Sys: sys}, done: make(chan forked, 1)}
	asCaller := req.NoCapabilities && req.UID == 0
	if asCaller {
		// The forking thread already is the command's user; setgroups
		// in the child would need the capability it must not have.
		sys.Credential = nil
	}
	r := s.forkFor(f, asCaller, req.identity())
	if cg != nil {
		if cerr := cg.Leave(); cerr != nil {
			// Ended by pid then, sparing the init (see cgroup.Received.Kill).
			fmt.Fprintf(os.Stderr, "sandbox init: %v\n", cerr)
		}
	}
	pid, err := r.pid, r.err
	if err == nil {
		c.pid.Store(int64(pid))
		c.cg = cg
		s.waiting[pid] = c.status
	}
	s.mu.Unlock()
	if _, ended := c.ended.Load().(string); ended {
		c.kill(syscall.SIGKILL) // its output passed the limit before its pid was known
	}
	if err != nil {
		if c.master != nil {
			c.master.Close()
		}
		return nil, fmt.Errorf("starting %s in %s: %w", path, dir, whyNotStarted(err, path, dir, req.identity()))
	}
	if req.Timeout > 0 {
		c.timer = time.AfterFunc(req.Timeout, func() { c.end(TimedOut) })
	}
	return c, nil
}

// countOutput puts pipes between the command and the caller's stdout and
// stderr that count what passes, and end the command past limit. It
// returns the pipes' write ends, for the command.
//
// The copies write as the command's user, not as the init: a descriptor
// the caller passed may be one only a privileged writer can use to harm
// (the caller's own /proc/PID/oom_score_adj, opened for writing).
func (c *command) countOutput(out []*os.File, limit int64, id creds.Identity) ([]*os.File, error) {
	var total atomic.Int64
	var ends []*os.File
	for _, dst := range out {
		r, w, err := os.Pipe()
		if err != nil {
			closeAll(ends)
			return nil, fmt.Errorf("making the output pipe: %w", err)
		}
		ends = append(ends, w)
		dst, err := dupFile(dst)
		if err != nil {
			r.Close()
			closeAll(ends)
			return nil, err
		}
		c.readers = append(c.readers, r)
		c.copies.Add(1)
		go func() {
			defer c.copies.Done()
			defer r.Close()
			defer dst.Close()
			runtime.LockOSThread() // never unlocked: see creds.BecomeOnThisThread
			if err := creds.BecomeOnThisThread(id); err != nil {
				fmt.Fprintf(os.Stderr, "sandbox init: copying a command's output: %v\n", err)
				c.end(OutputLimit)
				_, _ = io.Copy(io.Discard, r)
				return
			}
			buf := make([]byte, 32*1024)
			for {
				n, err := r.Read(buf)
				if n > 0 {
					over := total.Add(int64(n)) - limit
					keep := n
					if over > 0 {
						keep = max(n-int(over), 0)
					}
					if _, werr := dst.Write(buf[:keep]); werr != nil {
						return
					}
					if over > 0 {
						c.end(OutputLimit)
						_, _ = io.Copy(io.Discard, r) // until the command is gone
						return
					}
				}
				if err != nil {
					return
				}
			}
		}()
	}
	return ends, nil
}

func dupFile(f *os.File) (*os.File, error) {
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), f.Name()), nil
}

// whyNotStarted adds to err, execve's, the sentinel a shell's exit status
// follows: ErrNoProgram (127) when the program is not there as the
// command's user sees it (a dangling symlink too; ENOENT of a program
// that is there is a #! line's interpreter, left as it is), and
// ErrNotExecutable (126) for what cannot be run.
func whyNotStarted(err error, path, dir string, id creds.Identity) error {
	switch {
	case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.ENOEXEC), errors.Is(err, syscall.EISDIR):
		return whyErr{err, ErrNotExecutable}
	case errors.Is(err, syscall.ENOENT):
		if !filepath.IsAbs(path) {
			path = filepath.Join(dir, path)
		}
		var serr error
		if aerr := creds.AsCaller(id, func() { _, serr = os.Stat(path) }); aerr == nil && errors.Is(serr, os.ErrNotExist) {
			return whyErr{err, ErrNoProgram}
		}
	}
	return err
}

// whyErr is an error of execve's that is also why (a sentinel), saying
// only the former.
type whyErr struct{ err, why error }

func (e whyErr) Error() string   { return e.err.Error() }
func (e whyErr) Unwrap() []error { return []error{e.err, e.why} }

// lookPath finds name as the command's PATH would, inside the sandbox. A
// name with a slash is left to execve, relative to the command's
// directory, whose error the caller gets: the init does not stat it as
// root for the caller.
func lookPath(name, dir string, env []string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	path := "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin"
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	for _, d := range filepath.SplitList(path) {
		if !filepath.IsAbs(d) {
			d = filepath.Join(dir, d)
		}
		p := filepath.Join(d, name)
		if executable(p) == nil {
			return p, nil
		}
	}
	return "", whyErr{fmt.Errorf("%s: not found in PATH %s", name, path), ErrNoProgram}
}

func executable(p string) error {
	st, err := os.Stat(p)
	if err != nil {
		return err
	}
	if st.IsDir() || st.Mode()&0o111 == 0 {
		return fmt.Errorf("%s: not an executable file", p)
	}
	return nil
}

// makeHome makes an empty home for uid where there is none (the host's
// homes are hidden).
func makeHome(home string, uid, gid uint32) error {
	if _, err := os.Lstat(home); err == nil {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(home), 0o755); err != nil {
		return fmt.Errorf("making home %s: %w", home, err)
	}
	if err := os.Mkdir(home, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("making home %s: %w", home, err)
	}
	if err := os.Lchown(home, int(uid), int(gid)); err != nil {
		return fmt.Errorf("making home %s: %w", home, err)
	}
	return nil
}

// openPTY makes a pseudo-terminal in the sandbox's own devpts, its slave
// owned by uid.
func openPTY(rows, cols uint16, uid uint32) (master, slave *os.File, err error) {
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("opening a pseudo-terminal: %w", err)
	}
	fail := func(err error) (*os.File, *os.File, error) {
		m.Close()
		return nil, nil, fmt.Errorf("opening a pseudo-terminal: %w", err)
	}
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		return fail(err)
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		return fail(err)
	}
	name := fmt.Sprintf("/dev/pts/%d", n)
	if err := os.Chown(name, int(uid), -1); err != nil {
		return fail(err)
	}
	s, err := os.OpenFile(name, os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		return fail(err)
	}
	if rows > 0 && cols > 0 {
		_ = unix.IoctlSetWinsize(int(s.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols})
	}
	return m, s, nil
}

func closeAll(files []*os.File) {
	for _, f := range files {
		if f != nil {
			f.Close()
		}
	}
}

// watchSystem hands systemd's end to the reaper: from then on commands
// are forked in the init's own namespaces (forking into a pid namespace
// whose init has ended fails), and the sandbox answers as before.
func (s *server) watchSystem() {
	ended := make(chan syscall.WaitStatus, 1)
	s.mu.Lock()
	s.waiting[s.system.PID] = ended
	s.mu.Unlock()
	go func() {
		ws := <-ended
		s.system.Ended.Store(true)
		fmt.Fprintf(os.Stderr, "sandbox init: the sandbox's systemd ended (%v); commands now run in the init's namespaces\n", describe(ws))
	}()
}

// describe says how a process ended.
func describe(ws syscall.WaitStatus) string {
	if ws.Signaled() {
		return "signal " + ws.Signal().String()
	}
	return "status " + strconv.Itoa(ws.ExitStatus())
}
