// Package fork is the supervisor's room for forks: N new sandboxes whose
// copy of the project and system layer are a sandbox's as they stand
// (frozen through its cgroup for the instant of the snapshots, when it
// runs), each with its options, limits, network, owner, environment and
// base, and its own id, id block, quota and scope. The core makes each
// fork as it makes a sandbox (Host.CreateFork: admission counts it
// against the owner's bounds, its record first, its undo); the room takes
// the source's snapshots, which are named as unrecorded checkpoints of
// the source so that Reconcile removes them after a crash, and deletes
// them once the forks are made (a single fork takes none: its create
// snapshots the source's volumes straight, held through ForkSource.Hold). Checkpoints, exposed ports and background
// processes are not carried: the source's running processes are named in
// the result, and command lines given are started in each fork through
// the commands room.
package fork
