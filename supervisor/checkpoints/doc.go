// Package checkpoints is the supervisor's room for a sandbox's own
// history: named read-only checkpoints of its project copy and system
// layer (take, list, delete), a rollback to one, the diff of what it
// changed since its base (a list, or unified text), and a rebase onto
// its project as it is now. It is made over the core's Host
// (supervisor.Host and the few extras of Host below) and keeps no table
// of its own: a sandbox's checkpoints are in its record. As the daemon
// starts, before the sandboxes start again, it finishes the rollbacks a
// crash interrupted (the BeforeReconcile hook).
package checkpoints
