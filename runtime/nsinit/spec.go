// Package nsinit is a sandbox's init: the small process that lives inside
// the sandbox as pid 1 of its own PID namespace, builds the sandbox's world
// (a mount namespace whose root is an overlay of the host's `/`, the
// project's path bound to the sandbox's snapshot, private /tmp, /run, /dev
// and /proc, hidden host paths, UTS, IPC and, unless the network is the
// host's, network namespaces), and then starts commands in it on request.
//
// Commands join a live sandbox through its init rather than building
// namespaces again: Go cannot setns into a mount namespace once its runtime
// has threads, so the daemon sends each request, with the caller's stdin,
// stdout and stderr as file descriptors (SCM_RIGHTS), over the init's
// control socket, and the init forks the command as the caller. Nothing
// the command writes passes through the daemon.
//
// The daemon side is Start (make an init from a Spec) and Exec (run a
// command in a live one); the init side is Main, which builds the world
// (runtime/nsinit/world), starts a booted sandbox's systemd
// (runtime/nsinit/boot) and serves the control socket: commands and
// background processes here, files by runtime/nsinit/fileserve, each on
// a thread of the caller's credentials (runtime/nsinit/creds).
package nsinit

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/sandboxd/sandboxd/runtime/nsinit/boot"
	"github.com/sandboxd/sandboxd/runtime/nsinit/creds"
	"github.com/sandboxd/sandboxd/runtime/nsinit/world"
)

// The world an init builds is runtime/nsinit/world's; the daemon names
// it here.
type (
	// Spec is the world an init builds. Paths are as the daemon sees them.
	Spec = world.Spec
	// Bind is a host directory seen at another path inside the sandbox.
	Bind = world.Bind
	// Dir is a directory to make in the sandbox, with its owners and mode.
	Dir = world.Dir
	// Mounts are the idmapped mounts an init in a user namespace builds
	// its world from.
	Mounts = world.Mounts
)

// Network modes of a sandbox (see world.NetworkNone), and where it sees
// its owner's cache.
const (
	NetworkNone      = world.NetworkNone
	NetworkAllowlist = world.NetworkAllowlist
	NetworkHost      = world.NetworkHost
	CachePath        = world.CachePath
)

// ScratchSizeFor is the size of each of /tmp, /run and /dev/shm in a
// sandbox whose MemoryMax is memoryMax (0: none): a quarter of it.
func ScratchSizeFor(memoryMax uint64) uint64 { return world.ScratchSizeFor(memoryMax) }

// Control is the path of the init's control socket, and Root that of its
// root as mounted, for a sandbox whose runtime directory is dir.
func Control(dir string) string { return dir + "/control" }

// Request is a command to run in a sandbox.
type Request struct {
	Argv []string `json:"argv"`
	// Env is the command's whole environment.
	Env []string `json:"env"`
	// Dir is the working directory, inside the sandbox.
	Dir    string   `json:"dir"`
	UID    uint32   `json:"uid"`
	GID    uint32   `json:"gid"`
	Groups []uint32 `json:"groups,omitempty"`
	// NoCapabilities: uid 0 that did not ask for root (a root caller's
	// plain command) runs with no capability at all, so that it has
	// root's files by ownership and nothing more (no DAC override).
	NoCapabilities bool `json:"no_capabilities,omitempty"`
	// Home is made (empty, the caller's) if it does not exist.
	Home string `json:"home,omitempty"`
	// PTY: the command gets a new pseudo-terminal as its controlling
	// terminal and stdio; its master is handed back to the caller.
	PTY  bool   `json:"pty,omitempty"`
	Rows uint16 `json:"rows,omitempty"`
	Cols uint16 `json:"cols,omitempty"`
	// Timeout ends the command (its process group) after this long.
	Timeout time.Duration `json:"timeout,omitempty"`
	// OutputLimit ends the command once it has written this many bytes
	// to stdout and stderr together (0: no limit). Only then does the
	// output pass through the init, to be counted.
	OutputLimit int64 `json:"output_limit,omitempty"`
	// Spawn: run it in the background as process Spawn (an id, letters,
	// digits and '-'), its output to its log, for as long as it runs,
	// whoever waits (see Process).
	Spawn string `json:"spawn,omitempty"`
	// Cgroup: the request's last descriptors are those of the command's
	// cgroup (CommandCgroup.Files); when the command ends, everything in
	// its cgroup is ended with it. (An init of an older daemon, which
	// took two under another name, sees too many descriptors and says so;
	// the daemon then runs the command without.)
	Cgroup bool `json:"cgroup_files,omitempty"`
}

// How a command ended.
const (
	Exited      = "exited"       // Code is its exit status
	Signaled    = "signaled"     // Signal ended it
	OOMKilled   = "oom-killed"   // the sandbox's memory limit ended it
	TimedOut    = "timed-out"    // Request.Timeout ended it
	OutputLimit = "output-limit" // Request.OutputLimit ended it
	Lost        = "lost"         // the sandbox (its init) ended first
)

// Result is how a command ended.
type Result struct {
	How    string `json:"how"`
	Code   int    `json:"code"`
	Signal int    `json:"signal,omitempty"`
}

// String reads like a shell's report: "exited 0", "killed by signal 9
// (killed)", "killed by the memory limit".
func (r Result) String() string {
	switch r.How {
	case Exited:
		return fmt.Sprintf("exited %d", r.Code)
	case Signaled:
		return fmt.Sprintf("killed by signal %d (%v)", r.Signal, syscall.Signal(r.Signal))
	case OOMKilled:
		return "killed by the memory limit"
	case TimedOut:
		return "timed out"
	case OutputLimit:
		return "stopped at the output limit"
	case Lost:
		return "lost: the sandbox ended"
	}
	return r.How
}

// ExitCode is the status a shell would give: the code, or 128+signal.
func (r Result) ExitCode() int {
	switch r.How {
	case Exited:
		return r.Code
	case Signaled, OOMKilled, TimedOut, OutputLimit:
		if r.Signal == 0 {
			return 128 + int(syscall.SIGKILL)
		}
		return 128 + r.Signal
	}
	return 255
}

// Errors of Exec.
var (
	// ErrNotRunning: the sandbox's init does not answer (the sandbox is
	// being destroyed, or was never started).
	ErrNotRunning = errors.New("the sandbox's init is not running")
	// ErrCommand: the command could not be started (not found, not
	// executable, bad directory); the message says which.
	ErrCommand = errors.New("cannot start the command")
	// ErrNoProgram: the command's program is not there (not in its PATH,
	// or no such file): a shell's exit 127. Such an error is ErrCommand
	// too.
	ErrNoProgram = errors.New("no such program")
	// ErrNotExecutable: the program is there but cannot be run (no
	// permission, a directory, a format the kernel does not run): a
	// shell's exit 126. Such an error is ErrCommand too.
	ErrNotExecutable = errors.New("not executable")
)

// message is what travels on the control socket, one per datagram.
type message struct {
	Request *Request `json:"request,omitempty"`
	// Signal asks the init to signal the command's process group.
	Signal int `json:"signal,omitempty"`
	// Started answers a request: the command's pid inside the sandbox
	// (a pty's master travels with it).
	Started int     `json:"started,omitempty"`
	Exit    *Result `json:"exit,omitempty"`
	Error   string  `json:"error,omitempty"`
	// Start says why a command did not start, when it is known:
	// startNoProgram or startNotExecutable.
	Start string `json:"start,omitempty"`
	// Process asks about background processes; the answers are
	// Processes (with Listed: a list, or an acknowledgement), Log, and,
	// on a watch, Exited for each that ends.
	Process   *ProcessQuery `json:"process,omitempty"`
	Processes []Process     `json:"processes,omitempty"`
	Listed    bool          `json:"listed,omitempty"`
	Log       *LogChunk     `json:"log,omitempty"`
	Exited    *Process      `json:"exited,omitempty"`
	// FileRequest asks for a file read, written, listed or edited as the
	// caller (runtime/nsinit/fileserve), with its data pipe; File answers it.
	FileRequest *FileRequest `json:"file_request,omitempty"`
	File        *FileResult  `json:"file,omitempty"`
}

// envInit marks the process that must run Main ("1"; boot.EnvStage for
// a booted sandbox's boot stage).
const envInit = boot.EnvVar

// IsInit reports whether this process was started by Start to be a
// sandbox's init; its main function must then call Main and nothing else.
func IsInit() bool { v := os.Getenv(envInit); return v == "1" || v == boot.EnvStage }

// identity is whom the request's command runs as.
func (r *Request) identity() creds.Identity {
	return creds.Identity{UID: r.UID, GID: r.GID, Groups: r.Groups, NoCaps: r.NoCapabilities}
}

// program names the request's command in errors and logs: its program
// alone, quoted, as the rest of argv may hold secrets (tokens, passwords)
// that belong in the root-only audit log, not the journal.
func (r *Request) program() string {
	if len(r.Argv) == 0 {
		return `""`
	}
	return strconv.Quote(r.Argv[0])
}
