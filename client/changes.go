package client

import (
	"context"
	"fmt"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/sandboxd/sandboxd/sandboxd1"
)

// What a sandbox changed, and its checkpoints.

// Diff lists what the sandbox changed in its copy of the project since
// its base: added, modified, deleted, renamed and metadata changes.
func (s *Sandbox) Diff(ctx context.Context) ([]sandboxd1.ChangeEntry, error) {
	var changes []sandboxd1.ChangeEntry
	err := s.call(ctx, "listing the changes of", sandboxd1.MethodDiff, nil, &changes)
	return changes, err
}

// DiffCounted is Diff, and how many changed paths the project's ignore
// rules (.sandboxignore, [[project]] ignore) left out of it.
func (s *Sandbox) DiffCounted(ctx context.Context) ([]sandboxd1.ChangeEntry, int, error) {
	var changes []sandboxd1.ChangeEntry
	var ignored uint32
	err := s.call(ctx, "listing the changes of", sandboxd1.MethodDiffCounted, nil, &changes, &ignored)
	return changes, int(ignored), err
}

// UnifiedDiffOptions shape UnifiedDiff's text.
type UnifiedDiffOptions struct {
	// Context is the lines of context around each change; 0 is git's
	// 3, a negative number none.
	Context int
	// MaxBytes is where the text is cut, with a closing line saying so;
	// 0 is the daemon's bound (32 MiB).
	MaxBytes uint64
}

// wire is opts as the daemon's options: a context and a bound only
// where they are not the daemon's defaults.
func (opts UnifiedDiffOptions) wire() map[string]dbus.Variant {
	o := map[string]dbus.Variant{}
	switch {
	case opts.Context > 0:
		o[sandboxd1.OptContext] = dbus.MakeVariant(uint32(opts.Context))
	case opts.Context < 0:
		o[sandboxd1.OptContext] = dbus.MakeVariant(uint32(0))
	}
	if opts.MaxBytes > 0 {
		o[sandboxd1.OptMaxBytes] = dbus.MakeVariant(opts.MaxBytes)
	}
	return o
}

// UnifiedDiff is Diff's changes as a unified diff, as `git diff` shows
// it. A file the caller could not read on the host is named, its content
// not shown.
func (s *Sandbox) UnifiedDiff(ctx context.Context, opts UnifiedDiffOptions) (string, error) {
	o := opts.wire()
	var text string
	err := s.call(ctx, "diffing", sandboxd1.MethodUnifiedDiff, []any{o}, &text)
	return text, err
}

// ProjectChanges says how far the project moved since the sandbox's
// base: the paths it changed, and when the base was taken.
func (s *Sandbox) ProjectChanges(ctx context.Context) (paths []string, base time.Time, err error) {
	var us uint64
	err = s.call(ctx, "listing the project's changes since the base of", sandboxd1.MethodProjectChanges, nil, &paths, &us)
	return paths, fromMicros(us), err
}

// Rebase brings the sandbox onto its project as it is now, its own
// changes kept; a path the project changed too is ErrConflict, and the
// sandbox is left as it was. Its processes are stopped.
func (s *Sandbox) Rebase(ctx context.Context) error {
	return s.call(ctx, "rebasing", sandboxd1.MethodRebase, nil)
}

// Checkpoint takes a named read-only snapshot of the sandbox (its files
// and its system layer) and returns when it was taken.
func (s *Sandbox) Checkpoint(ctx context.Context, name string) (time.Time, error) {
	var us uint64
	err := s.call(ctx, fmt.Sprintf("taking checkpoint %q of", name), sandboxd1.MethodCheckpoint, []any{name}, &us)
	return fromMicros(us), err
}

// Checkpoints lists the sandbox's checkpoints, oldest first.
func (s *Sandbox) Checkpoints(ctx context.Context) ([]sandboxd1.CheckpointEntry, error) {
	var list []sandboxd1.CheckpointEntry
	err := s.call(ctx, "listing the checkpoints of", sandboxd1.MethodListCheckpoints, nil, &list)
	return list, err
}

// DeleteCheckpoint deletes a checkpoint of the sandbox.
func (s *Sandbox) DeleteCheckpoint(ctx context.Context, name string) error {
	return s.call(ctx, fmt.Sprintf("deleting checkpoint %q of", name), sandboxd1.MethodDeleteCheckpoint, []any{name})
}

// Rollback brings the sandbox back to a checkpoint: its processes are
// stopped (their commands end as HowLost), its files and system layer
// become the checkpoint's, and it is ready again, the same sandbox.
func (s *Sandbox) Rollback(ctx context.Context, name string) error {
	return s.call(ctx, fmt.Sprintf("rolling back to checkpoint %q of", name), sandboxd1.MethodRollback, []any{name})
}
