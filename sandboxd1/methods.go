package sandboxd1

// Methods of org.sandboxd1.Manager (on ManagerPath).
const (
	MethodCreateSandbox         = "CreateSandbox"
	MethodListSandboxes         = "ListSandboxes"
	MethodGetSandbox            = "GetSandbox"
	MethodDestroySandbox        = "DestroySandbox"
	MethodListProjects          = "ListProjects"
	MethodAddProject            = "AddProject"
	MethodAddProjectWithOptions = "AddProjectWithOptions"
	MethodRemoveProject         = "RemoveProject"
	MethodTry                   = "Try"
	MethodListPromotions        = "ListPromotions"
	MethodGetPromotion          = "GetPromotion"
	MethodApprovePromotion      = "ApprovePromotion"
	MethodRejectPromotion       = "RejectPromotion"
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
	MethodRebase           = "Rebase"
	MethodProjectChanges   = "ProjectChanges"
	MethodPromote          = "Promote"
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
	// interpreter (python3, node, sh); Eval(s session, s code) → (s
	// output, i status), its output and status for that input, its
	// variables kept; CloseSession(s session).
	MethodOpenSession  = "OpenSession"
	MethodEval         = "Eval"
	MethodCloseSession = "CloseSession"
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
