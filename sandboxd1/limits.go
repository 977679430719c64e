package sandboxd1

// GetLimits() → (tttttttttttttt) Limits: what the caller uses of each bound
// on its sandboxes, and what all sandboxes together use of theirs.
const MethodGetLimits = "GetLimits"

// Unknown is an amount the daemon could not read (accounting off, a
// controller the host's cgroups lack).
const Unknown = ^uint64(0)

// Limits is GetLimits' answer, the D-Bus struct (tttttttttttttt). A ...Max
// of 0 is no bound; a used amount of Unknown was not known.
type Limits struct {
	// The caller's: the memory (bytes) and tasks of its slice,
	// sandboxd-u<uid>.slice, against limits.user_memory_max and
	// user_tasks_max; its live sandboxes against max_sandboxes_per_user.
	Memory, MemoryMax       uint64
	Tasks, TasksMax         uint64
	Sandboxes, SandboxesMax uint64
	// All sandboxes': sandboxd.slice's memory and tasks against
	// limits.slice_memory_max and slice_tasks_max; the live sandboxes
	// against max_sandboxes.
	AllMemory, AllMemoryMax       uint64
	AllTasks, AllTasksMax         uint64
	AllSandboxes, AllSandboxesMax uint64
	// The MemoryMax promised to all live sandboxes, against
	// limits.max_memory.
	Promised, PromisedMax uint64
}
