package nsinit

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/runtime/nsinit/boot"
	"github.com/sandboxd/sandboxd/runtime/nsinit/creds"
	"github.com/sandboxd/sandboxd/runtime/nsinit/world"
	"github.com/sandboxd/sandboxd/runtime/seccomp"
)

// init keeps an init's main goroutine on the main thread for good (init
// functions run there): the kernel checks a signal to pid 1, and reads
// of /proc/1, against that thread's credentials, and a goroutine that
// takes a caller's credentials on its thread (creds.AsCaller) must never be
// scheduled there, or nobody in the sandbox could kill its init.
func init() {
	if IsInit() {
		runtime.LockOSThread()
	}
}

// Main is the init: it reads its Spec from fd 3, builds the sandbox's
// world, answers "ok" (or what failed) on fd 3, and then runs commands on
// request until the sandbox's scope is stopped. It never returns.
func Main() {
	if os.Getenv(envInit) == boot.EnvStage {
		boot.Stage()
	}
	// First: no one with the init's host uid (a block's, or nobody's for
	// the probe) may ptrace it or read its memory while it starts.
	_ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	syscall.Umask(0o022)
	// Few threads, made now (see spareThreads): the init is a server of
	// small requests, whatever the host's number of CPUs.
	runtime.GOMAXPROCS(min(runtime.GOMAXPROCS(0), maxProcs))
	reserveThreads(spareThreads)
	setup := os.NewFile(3, "setup")
	fail := func(err error) {
		fmt.Fprintln(setup, err)
		os.Exit(1)
	}
	spec, control, mounts, err := readSpec(setup)
	if err != nil {
		fail(fmt.Errorf("reading the spec: %w", err))
	}
	// The memory limit's OOM killer must pick a command, never the init
	// (whose end is the sandbox's), and no one may read its memory.
	_ = os.WriteFile("/proc/self/oom_score_adj", []byte("-1000"), 0)
	ln, logs, console, err := world.Build(&spec, control, mounts)
	if err != nil {
		fail(err)
	}
	s := newServer()
	s.procs = newProcesses(logs)
	if spec.Boot {
		// Before any filter: the boot stage takes its own.
		s.system, err = boot.Start(spec.ID, spec.Payload, console)
		spec.Payload.Close()
		console.Close()
		if err == nil {
			err = world.MaskSystemProc()
		}
		if err != nil {
			fail(err)
		}
		s.watchSystem()
	}
	if err := s.startForker(); err != nil {
		fail(err)
	}
	fmt.Fprintln(setup, "ok")
	setup.Close()

	go s.reap()
	// Stopping the scope sends SIGTERM: end every command at once rather
	// than wait for the stop timeout.
	// Signals the init has no use for are caught and dropped: Go's
	// runtime would otherwise end pid 1 (and the sandbox) on any of them.
	// Caught, not ignored: an ignored signal stays ignored in the commands
	// the init starts, a caught one is theirs again after exec.
	dropped := make(chan os.Signal, 8)
	signal.Notify(dropped, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGALRM,
		syscall.SIGVTALRM, syscall.SIGPROF)
	go func() {
		for range dropped {
		}
	}()
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	go func() {
		<-term
		_ = syscall.Kill(-1, syscall.SIGKILL) // everything in this PID namespace but us
		os.Exit(0)
	}()
	s.serve(ln)
	os.Exit(1)
}

// spareThreads is how many OS threads the init makes at its start and
// keeps: the Go runtime makes one whenever its others are blocked in
// system calls (a log read, a file call), and ends the process if it
// cannot. The sandbox's TasksMax counts the init's threads with its
// processes: once a command has forked up to it, a thread made then would
// fail, and the sandbox with it.
const spareThreads = 6

// maxProcs bounds the init's Go processors (and with them the threads it
// runs at once).
const maxProcs = 2

// reserveThreads has the runtime make n threads now, which it keeps idle
// for reuse (it never ends a thread it does not have to).
func reserveThreads(n int) {
	var locked, release sync.WaitGroup
	locked.Add(n)
	release.Add(1)
	for range n {
		go func() {
			runtime.LockOSThread() // each on a thread of its own
			locked.Done()
			release.Wait()
			runtime.UnlockOSThread()
		}()
	}
	locked.Wait()
	release.Done()
}

// maxSpec bounds the spec's datagram (its hidden and read-only paths).
const maxSpec = 1 << 20

// readSpec reads the spec, the control socket (bound, not listening) and
// the descriptors of its mounts, one datagram.
func readSpec(setup *os.File) (Spec, *os.File, *Mounts, error) {
	var spec Spec
	// Its length first (MSG_TRUNC tells a datagram's whole length): a
	// buffer of the bound would stay in the init's heap for its life.
	size, _, _, _, err := unix.Recvmsg(int(setup.Fd()), make([]byte, 1), nil, unix.MSG_PEEK|unix.MSG_TRUNC)
	if err != nil {
		return spec, nil, nil, err
	}
	if size > maxSpec {
		return spec, nil, nil, fmt.Errorf("the spec is %d bytes, over %d", size, maxSpec)
	}
	buf := make([]byte, size)
	oob := make([]byte, unix.CmsgSpace(64*4))
	n, oobn, flags, _, err := unix.Recvmsg(int(setup.Fd()), buf, oob, unix.MSG_CMSG_CLOEXEC)
	if err != nil {
		return spec, nil, nil, err
	}
	var files []*os.File
	if cmsgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
		for _, c := range cmsgs {
			if fds, err := unix.ParseUnixRights(&c); err == nil {
				for _, fd := range fds {
					files = append(files, os.NewFile(uintptr(fd), "passed"))
				}
			}
		}
	}
	fail := func(err error) (Spec, *os.File, *Mounts, error) {
		closeAll(files)
		return spec, nil, nil, err
	}
	if flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 {
		return fail(errors.New("the spec or its descriptors were cut short"))
	}
	if err := json.Unmarshal(buf[:n], &spec); err != nil {
		return fail(err)
	}
	want := 1
	if spec.UserNS {
		want += spec.Lowers + 2
		if spec.CacheFD {
			want++
		}
		if spec.Boot {
			want++
		}
	}
	if len(files) != want || spec.UserNS && spec.Lowers < 1 || (spec.CacheFD || spec.Boot) && !spec.UserNS {
		return fail(fmt.Errorf("want the control socket and, in a user namespace, %d lower layers, the system layer, the project, (if told) the cache and (booted) the payload cgroup as descriptors; got %d descriptors", spec.Lowers, len(files)))
	}
	if !spec.UserNS {
		return spec, files[0], nil, nil
	}
	m := files[1:]
	mounts := &Mounts{Lowers: m[:spec.Lowers], Layer: m[spec.Lowers], Project: m[spec.Lowers+1]}
	if spec.CacheFD {
		mounts.Cache = m[spec.Lowers+2]
	}
	if spec.Boot {
		spec.Payload = files[len(files)-1]
	}
	return spec, files[0], mounts, nil
}

// lockdown bounds what the init's children can ever hold: the capability
// bounding set shrinks to what a root command keeps (creds), no new
// privileges (setuid binaries and file capabilities grant nothing), and
// the seccomp filter. Capabilities are per thread: the caller is the
// locked thread that forks every command (the seccomp filter and
// no_new_privs reach all threads).
func lockdown() error {
	if err := creds.DropCapabilities(); err != nil {
		return err
	}
	return seccomp.Install()
}
