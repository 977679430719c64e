package sandboxd1

// Methods of org.sandboxd1.Manager (on ManagerPath).
const (
	MethodCreateSandbox = "CreateSandbox"
	MethodListSandboxes = "ListSandboxes"
	MethodGetSandbox    = "GetSandbox"
	// FindSandbox(s sandbox) -> (ssssuto): the sandbox named by its id,
	// its name or a prefix of its id only it has.
	MethodFindSandbox           = "FindSandbox"
	MethodDestroySandbox        = "DestroySandbox"
	MethodListProjects          = "ListProjects"
	MethodAddProject            = "AddProject"
	MethodAddProjectWithOptions = "AddProjectWithOptions"
	MethodRemoveProject         = "RemoveProject"
	// AdoptProject(s name, s path, a{sv} options): a directory made a
	// project where it lives (Users, Groups as AddProjectWithOptions);
	// ReleaseProject(s name) undoes it. Root and admins only.
	MethodAdoptProject     = "AdoptProject"
	MethodReleaseProject   = "ReleaseProject"
	MethodTry              = "Try"
	MethodListPromotions   = "ListPromotions"
	MethodGetPromotion     = "GetPromotion"
	MethodApprovePromotion = "ApprovePromotion"
	MethodRejectPromotion  = "RejectPromotion"
	// ApprovePromotionWithOptions(s id, a{sv} options): ApprovePromotion
	// with OptDigest, the digest of the change the admin saw (refused,
	// WrongState, when the promotion's is another).
	MethodApprovePromotionWithOptions = "ApprovePromotionWithOptions"
	// PromotionDiff(s id, a{sv} options) → (s diff, s digest): a
	// promotion's change as a unified text diff (UnifiedDiff's options
	// and bounds), and the digest of the change it shows.
	MethodPromotionDiff = "PromotionDiff"
	// ClearCache() empties the caller's cache volume (pip, npm, Go,
	// cargo), which its sandboxes share.
	MethodClearCache = "ClearCache"
)

// Methods of org.sandboxd1.Sandbox (on SandboxPath(id)).
const (
	MethodDestroy          = "Destroy"
	MethodFreeze           = "Freeze"
	MethodThaw             = "Thaw"
	MethodExec             = "Exec"
	MethodExecTerminal     = "ExecTerminal"
	MethodSignal           = "Signal"
	MethodCheckpoint       = "Checkpoint"
	MethodListCheckpoints  = "ListCheckpoints"
	MethodDeleteCheckpoint = "DeleteCheckpoint"
	MethodRollback         = "Rollback"
	MethodDiff             = "Diff"
	MethodUnifiedDiff      = "UnifiedDiff"
	// DiffCounted() → (a(ssss) changes, u ignored): Diff's list and how
	// many changed paths the project's ignore rules left out of it.
	MethodDiffCounted    = "DiffCounted"
	MethodRebase         = "Rebase"
	MethodProjectChanges = "ProjectChanges"
	MethodPromote        = "Promote"
	// Background processes (issue 21): Spawn(as argv, a{sv} options) →
	// (s process), with Exec's options; ListProcesses() →
	// a(sasuttsii) (ProcessEntry); ReadLog(s process, t offset, u max) →
	// (ay data, t next, b ended); SignalProcess(s process, i signal).
	MethodSpawn         = "Spawn"
	MethodListProcesses = "ListProcesses"
	MethodReadLog       = "ReadLog"
	MethodSignalProcess = "SignalProcess"
	// Ports: ExposePort(q port, a{sv} options) → (s address), with
	// OptTCP; ClosePort(q port).
	MethodExposePort = "ExposePort"
	MethodClosePort  = "ClosePort"
	// Sessions: OpenSession(s language, a{sv} options) → (s session), a long-lived
	// interpreter (python3, node, sh, go, sql); Eval(s session, s code) → (s
	// output, i status), its output and status for that input, its
	// variables kept; CloseSession(s session).
	MethodOpenSession  = "OpenSession"
	MethodEval         = "Eval"
	MethodCloseSession = "CloseSession"
	// Stop() ends the sandbox's processes and keeps it (files,
	// checkpoints, ports, declared processes), state "stopped", across
	// the daemon's restarts and the host's reboots; Start() runs it again
	// (a booted one boots; processes spawned with OptRestart start
	// again). Stop of a stopped sandbox and Start of a running one do
	// nothing.
	MethodStop  = "Stop"
	MethodStart = "Start"
	// Fork(a{sv} options) → (as ids, as not_carried): OptCount new
	// sandboxes (OptNames) whose files and system layer are the
	// sandbox's as they stand (frozen for the instant of the snapshots),
	// each with its options, limits, network, owner and base; the
	// sandbox's background processes are not carried (not_carried: their
	// command lines), OptSpawn's are started in each fork.
	MethodFork = "Fork"
)

// A booted sandbox's systemd (OptBoot): SystemStatus() → (s state, as
// failed), systemctl is-system-running's word ("offline" once it has
// ended) and the failed units. WrongState for a sandbox not booted.
const MethodSystemStatus = "SystemStatus"

// The file API (issue 19): done by the sandbox's init, in the sandbox's
// view and as the caller (root of the sandbox's user namespace with the
// Root option), so a path means what it means to the caller's commands:
// symlinks resolve inside, permissions are the caller's. A relative path
// is taken from the project's directory.
const (
	// ReadFile(s path, t offset, t max) → (ay data): at most max bytes
	// (0: MaxFileChunk) of a regular file from offset; fewer at its end.
	MethodReadFile = "ReadFile"
	// WriteFile(s path, ay data, a{sv} options): OptMode, OptCreate,
	// OptAppend, OptOffset; at most MaxFileChunk bytes a call (a larger
	// file goes in chunks, each appended).
	MethodWriteFile = "WriteFile"
	// ListFiles(s path, a{sv} options) → a(ssuutts) (FileEntry): a
	// directory's entries (with OptRecursive, those below it too, up to
	// OptMaxEntries), or a file's own entry.
	MethodListFiles = "ListFiles"
	// EditFile(s path, s old, s new) → (u replacements): every
	// occurrence of old (not empty; at most MaxEditText, as new) becomes
	// new, in a file of at most MaxEditFile; none is an error.
	MethodEditFile = "EditFile"
	// ReadFileTo(s path, h pipe, a{sv} options) → (t bytes) and
	// WriteFileFrom(s path, h pipe, a{sv} options) → (t bytes): a whole
	// file of any size through the caller's pipe (its write end, to read;
	// its read end, to write), which the caller reads or writes while the
	// call runs. WriteFileFrom takes WriteFile's options. (godbus encodes
	// an ay a byte at a time: about 4 MB/s; a pipe is hundreds.)
	MethodReadFileTo    = "ReadFileTo"
	MethodWriteFileFrom = "WriteFileFrom"
)

// Bounds of the file API: the data of one ReadFile or WriteFile (an ay
// costs godbus about a second a 4 MiB; a larger file goes through
// ReadFileTo and WriteFileFrom), each of EditFile's texts, and the file
// EditFile takes.
const (
	MaxFileChunk = 4 << 20
	MaxEditText  = 1 << 20
	MaxEditFile  = 16 << 20
)

// Methods of the standard interfaces the objects have.
const (
	MethodGet        = "Get"
	MethodGetAll     = "GetAll"
	MethodSet        = "Set"
	MethodIntrospect = "Introspect"
)

// Signals.
const (
	// Of the manager: SandboxNew(s id, o object), SandboxRemoved(s id,
	// o object), StateChanged(s id, s state).
	SignalSandboxNew     = "SandboxNew"
	SignalSandboxRemoved = "SandboxRemoved"
	SignalStateChanged   = "StateChanged"
	// Of a sandbox, to the caller of Exec alone: CommandExited(s command,
	// s how, i status, i signal).
	SignalCommandExited = "CommandExited"
	// Of a sandbox, to its owner: ProcessExited(s process, s how, i
	// status, i signal), when a process Spawn started ends.
	SignalProcessExited = "ProcessExited"
	// Of a sandbox's Properties interface.
	SignalPropertiesChanged = "PropertiesChanged"
)

// Member is iface's member name as a client calls it: "org.sandboxd1.Manager.Try".
func Member(iface, name string) string { return iface + "." + name }
