package sandboxd1

// Options of CreateSandbox's a{sv} (and of Try's, which makes its
// sandboxes with them). Names and units follow systemd's unit properties,
// so a caller who knows `systemd-run -p` knows these. The Limits property
// has the limits under the same names.
const (
	OptMemoryMax          = "MemoryMax"          // t, bytes; at least MinMemoryMax
	OptMemoryHigh         = "MemoryHigh"         // t, bytes
	OptMemorySwapMax      = "MemorySwapMax"      // t, bytes
	OptTasksMax           = "TasksMax"           // t
	OptCPUWeight          = "CPUWeight"          // t, 1..10000
	OptIOWeight           = "IOWeight"           // t, 1..10000
	OptCPUQuotaPerSecUSec = "CPUQuotaPerSecUSec" // t, µs of CPU time per second
	OptRuntimeMaxUSec     = "RuntimeMaxUSec"     // t, µs
	OptDiskQuota          = "DiskQuota"          // t, bytes, above 0
	OptTTLUSec            = "TTLUSec"            // t, µs, above 0
	OptName               = "Name"               // s, not empty
	OptProfile            = "Profile"            // s
	OptNetwork            = "Network"            // s: none, allowlist or host
	OptAllow              = "Allow"              // as, host:port entries
	OptReadOnlyProject    = "ReadOnlyProject"    // b
	OptBoot               = "Boot"               // b: a systemd of its own (needs a user namespace)
)

// MinMemoryMax is the least MemoryMax a sandbox may have: its init, the
// shell a command runs in and the kernel's own accounting of the cgroup
// need a few MiB before anything of the caller's runs; below this the
// init is killed as it starts, and the sandbox cannot run anything.
const MinMemoryMax = 16 * MiB

// Options of Exec's and ExecTerminal's a{sv}.
const (
	OptEnvironment      = "Environment"      // as, KEY=value
	OptWorkingDirectory = "WorkingDirectory" // s
	OptRoot             = "Root"             // b: root of the sandbox's user namespace (without one: for root only)
	OptTimeoutUSec      = "TimeoutUSec"      // t, µs
	OptOutputLimit      = "OutputLimit"      // t, bytes of stdout and stderr together (Exec)
	OptDetach           = "Detach"           // b
)

// Options of ExposePort's a{sv}.
const (
	// OptTCP: also listen on a loopback TCP port (b); the address
	// returned is then that one, "127.0.0.1:PORT".
	OptTCP = "TCP"
)

// Options of Promote's a{sv}.
const (
	OptForce           = "Force"           // b
	OptTo              = "To"              // s, the last stage to go to
	OptAllowPrivileged = "AllowPrivileged" // b, for an admin only
	// OptAllowEmpty (b): a sandbox that changed nothing is no error:
	// Promote returns an empty id (and records nothing either way).
	OptAllowEmpty = "AllowEmpty"
)

// Options of ApprovePromotionWithOptions' a{sv}.
const OptDigest = "Digest" // s, the digest of the change the admin saw

// Options of UnifiedDiff's (and PromotionDiff's) a{sv}.
const (
	OptContext  = "Context"  // u, lines of context
	OptMaxBytes = "MaxBytes" // t, where the text is cut
)

// Options of AddProjectWithOptions' a{sv}: who may use the project,
// names or numeric ids.
const (
	OptUsers  = "Users"  // as
	OptGroups = "Groups" // as
	// OptRestartUnits (b, AdoptProject): the services whose processes
	// use the directory are stopped for the adoption and started again.
	OptRestartUnits = "RestartUnits"
	// OptMorePaths (as, AdoptProject): further directories adopted into
	// the same project (its data beside its app), one volume holding each
	// at its own path, snapshotted, diffed and promoted as one.
	OptMorePaths = "MorePaths"
	// OptFreezeUnits (as, AdoptProject): host services that write the
	// project, frozen while a sandbox's base is snapshotted.
	OptFreezeUnits = "FreezeUnits"
)

// Options of Try's a{sv}, besides CreateSandbox's (Name is the prefix of
// its sandboxes' names) and Exec's Environment, WorkingDirectory, Root,
// TimeoutUSec (each step's; 0: none; default 10 minutes) and Detach.
const (
	OptInputs   = "Inputs"   // as, a sandbox each, as $SANDBOX_INPUT; with one variant
	OptParallel = "Parallel" // u, most sandboxes at work at once (default 4)
	// OptFrom (s): the variants run in forks of this sandbox (its id or
	// name) rather than in new sandboxes of the project: what it set up
	// is there in each.
	OptFrom = "From"
)

// Options of Fork's a{sv}.
const (
	OptCount = "Count" // u, forks to make, 1 to MaxForks (default 1)
	OptNames = "Names" // as, a name for each fork, at most Count ("" for none)
	// OptSpawn (aas): command lines started as background processes in
	// each fork (the source's are not carried).
	OptSpawn = "Spawn"
)

// MaxForks bounds one Fork's count.
const MaxForks = 16

// Options of Spawn's a{sv}, besides Exec's.
const (
	// OptRestart (b): the process is declared in the sandbox's record and
	// started again each time the sandbox starts (Start, the host's
	// reboot, a rollback).
	OptRestart = "Restart"
)

// Try's keep argument: which sandboxes stay.
const (
	KeepWinner = "winner"
	KeepAll    = "all"
	KeepNone   = "none"
)

// Options of WriteFile's a{sv}.
const (
	OptMode   = "Mode"   // u, permission bits of a file it makes (default 0644)
	OptCreate = "Create" // b, make the file if missing (default true)
	OptAppend = "Append" // b, add to its end (default: it is truncated first)
	// OptOffset (t): write at this offset, neither truncating nor
	// appending.
	OptOffset = "Offset"
)

// Options of ListFiles' a{sv}.
const (
	OptRecursive  = "Recursive"  // b, the whole tree below (symlinks not followed)
	OptMaxEntries = "MaxEntries" // u, default and most: MaxListEntries
)

// MaxListEntries bounds one ListFiles' entries; past it the call fails,
// naming the bound.
const MaxListEntries = 10000
