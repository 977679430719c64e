package api

import (
	"context"
	"errors"
	"strings"

	"github.com/godbus/dbus/v5"

	"github.com/sandboxd/sandboxd/promote/unidiff"
	"github.com/sandboxd/sandboxd/sandboxd1"
	"github.com/sandboxd/sandboxd/supervisor/api/options"
	"github.com/sandboxd/sandboxd/supervisor/checkpoints"
)

// onSandbox runs fn for a caller that may see the sandbox msg is sent to,
// and audits the call as action.
func (o sandboxObject) onSandbox(sender dbus.Sender, msg dbus.Message, action string, fn func(ctx context.Context, id string) error) *dbus.Error {
	s := o.s
	r, derr := s.begin(sender, action)
	if derr != nil {
		return derr
	}
	id, derr := objectID(msg)
	if derr != nil {
		return s.end(r, "", derr)
	}
	if _, derr := s.lookup(r, id); derr != nil {
		return s.end(r, id, derr)
	}
	if err := fn(r.ctx, id); err != nil {
		return s.end(r, id, fromSupervisor(err))
	}
	return s.end(r, id, nil)
}

// errNoCheckpoints: the daemon was made without the checkpoints room.
var errNoCheckpoints = errors.New("checkpoints, rollback, diff and rebase are not served by this daemon")

// onCheckpoints is onSandbox for a call of the checkpoints room.
func (o sandboxObject) onCheckpoints(sender dbus.Sender, msg dbus.Message, action string, fn func(ctx context.Context, cks *checkpoints.Checkpoints, id string) error) *dbus.Error {
	return o.onSandbox(sender, msg, action, func(ctx context.Context, id string) error {
		cks := o.s.rooms.Checkpoints
		if cks == nil {
			return errNoCheckpoints
		}
		return fn(ctx, cks, id)
	})
}

// Checkpoint(s name) -> (t created) takes a named read-only snapshot of
// the sandbox (its project copy and its system layer).
func (o sandboxObject) Checkpoint(sender dbus.Sender, msg dbus.Message, name string) (uint64, *dbus.Error) {
	var created uint64
	derr := o.onCheckpoints(sender, msg, "Checkpoint", func(ctx context.Context, cks *checkpoints.Checkpoints, id string) error {
		ck, err := cks.Take(ctx, id, name)
		created = micros(ck.Created)
		return err
	})
	return created, derr
}

// ListCheckpoints() -> a(stb): name, created (µs), whether the system
// layer is in it; oldest first.
func (o sandboxObject) ListCheckpoints(sender dbus.Sender, msg dbus.Message) ([]sandboxd1.CheckpointEntry, *dbus.Error) {
	out := []sandboxd1.CheckpointEntry{}
	derr := o.onCheckpoints(sender, msg, "ListCheckpoints", func(ctx context.Context, cks *checkpoints.Checkpoints, id string) error {
		list, err := cks.List(ctx, id)
		for _, c := range list {
			out = append(out, sandboxd1.CheckpointEntry{Name: c.Name, Created: micros(c.Created), Layer: c.Layer})
		}
		return err
	})
	return out, derr
}

// DeleteCheckpoint(s name).
func (o sandboxObject) DeleteCheckpoint(sender dbus.Sender, msg dbus.Message, name string) *dbus.Error {
	return o.onCheckpoints(sender, msg, "DeleteCheckpoint", func(ctx context.Context, cks *checkpoints.Checkpoints, id string) error {
		return cks.Delete(ctx, id, name)
	})
}

// Rollback(s name) stops the sandbox, brings its files and system layer
// back to the checkpoint, and starts it again.
func (o sandboxObject) Rollback(sender dbus.Sender, msg dbus.Message, name string) *dbus.Error {
	return o.onCheckpoints(sender, msg, "Rollback", func(ctx context.Context, cks *checkpoints.Checkpoints, id string) error {
		_, err := cks.Rollback(ctx, id, name)
		if err == nil {
			_ = o.s.SandboxChanged(ctx, id)
		}
		return err
	})
}

// Diff() -> a(ssss): what the sandbox changed in its project copy since
// its base: kind, type, path, new path (of a rename).
func (o sandboxObject) Diff(sender dbus.Sender, msg dbus.Message) ([]sandboxd1.ChangeEntry, *dbus.Error) {
	out := []sandboxd1.ChangeEntry{}
	derr := o.onCheckpoints(sender, msg, "Diff", func(ctx context.Context, cks *checkpoints.Checkpoints, id string) error {
		changes, err := cks.Diff(ctx, id)
		for _, c := range changes {
			out = append(out, sandboxd1.ChangeEntry{Kind: string(c.Kind), Type: string(c.Type), Path: busString(c.Path), NewPath: busString(c.NewPath)})
		}
		return err
	})
	return out, derr
}

// DiffCounted() -> (a(ssss) changes, u ignored): Diff's list, and how
// many changed paths the project's ignore rules left out of it (Diff's
// signature is published: the count needs a method of its own).
func (o sandboxObject) DiffCounted(sender dbus.Sender, msg dbus.Message) ([]sandboxd1.ChangeEntry, uint32, *dbus.Error) {
	out, ignored := []sandboxd1.ChangeEntry{}, 0
	derr := o.onCheckpoints(sender, msg, "DiffCounted", func(ctx context.Context, cks *checkpoints.Checkpoints, id string) error {
		changes, n, err := cks.DiffCounted(ctx, id)
		for _, c := range changes {
			out = append(out, sandboxd1.ChangeEntry{Kind: string(c.Kind), Type: string(c.Type), Path: busString(c.Path), NewPath: busString(c.NewPath)})
		}
		ignored = n
		return err
	})
	return out, uint32(ignored), derr
}

// UnifiedDiff(a{sv} options) -> (s diff): what the sandbox changed since
// its base as a unified text diff (binary files named as such). Options:
// Context (u) lines of context, MaxBytes (t) where the text is cut (at
// most 32 MiB, the default).
func (o sandboxObject) UnifiedDiff(sender dbus.Sender, msg dbus.Message, opts map[string]dbus.Variant) (string, *dbus.Error) {
	var out strings.Builder
	derr := o.onCheckpoints(sender, msg, "UnifiedDiff", func(ctx context.Context, cks *checkpoints.Checkpoints, id string) error {
		lines, most, err := options.UnifiedDiff(opts)
		if err != nil {
			return err
		}
		return cks.UnifiedDiff(ctx, id, &out, unidiff.Options{Context: lines, MaxBytes: most})
	})
	return busString(out.String()), derr
}

// Rebase() brings the sandbox onto its project as it is now: a new base,
// and the sandbox's own changes applied onto a copy of it; refused
// (Conflict) where the project changed the same paths. The sandbox's
// processes are stopped and it starts again, as after a Rollback.
func (o sandboxObject) Rebase(sender dbus.Sender, msg dbus.Message) *dbus.Error {
	return o.onCheckpoints(sender, msg, "Rebase", func(ctx context.Context, cks *checkpoints.Checkpoints, id string) error {
		_, err := cks.Rebase(ctx, id)
		if err == nil {
			_ = o.s.SandboxChanged(ctx, id)
		}
		return err
	})
}

// ProjectChanges() -> (as paths, t base): the paths the project changed
// since the sandbox's base (access times left out), and when the base was
// taken (µs since the epoch).
func (o sandboxObject) ProjectChanges(sender dbus.Sender, msg dbus.Message) ([]string, uint64, *dbus.Error) {
	paths := []string{}
	var base uint64
	derr := o.onSandbox(sender, msg, "ProjectChanges", func(ctx context.Context, id string) error {
		m, err := o.s.sup.ProjectMoves(ctx, id)
		for _, p := range m.Paths {
			paths = append(paths, busString(p))
		}
		base = micros(m.Base)
		return err
	})
	return paths, base, derr
}

// busString makes s sendable as a D-Bus string, which must be UTF-8: a
// file name or a file's text need not be, and one such byte would make
// the whole reply fail. Bytes that are not UTF-8 become U+FFFD.
func busString(s string) string { return strings.ToValidUTF8(s, "\uFFFD") }
