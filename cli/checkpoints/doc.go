// Package checkpoints is sandboxctl's verbs about a sandbox's changes and
// their points in time: checkpoint, checkpoints, rollback, diff (a list, or
// a unified text made safe for a terminal) and rebase.
package checkpoints
