package api

import (
	"context"
	"fmt"

	"github.com/godbus/dbus/v5"

	"github.com/sandboxd/sandboxd/sandboxd1"
	"github.com/sandboxd/sandboxd/supervisor"
	"github.com/sandboxd/sandboxd/supervisor/checkpoints"
	"github.com/sandboxd/sandboxd/supervisor/commands"
)

// Conflicts an agent can resolve: a path's three versions, and a
// three-way merge written into the sandbox as the caller.

// FileVersions(s path, a{sv} options) -> (a(sstbbays) versions): the
// base's, the project's (as it is now) and the sandbox's version of
// path, relative to the project's top. Options: MaxBytes (t) bounds
// each (at most and by default MaxVersionBytes).
func (o sandboxObject) FileVersions(sender dbus.Sender, msg dbus.Message, path string, opts map[string]dbus.Variant) ([]sandboxd1.FileVersion, *dbus.Error) {
	out := []sandboxd1.FileVersion{}
	derr := o.onCheckpoints(sender, msg, sandboxd1.MethodFileVersions, func(ctx context.Context, cks *checkpoints.Checkpoints, id string) error {
		limit := uint64(sandboxd1.MaxVersionBytes)
		for name, v := range opts {
			x, ok := v.Value().(uint64)
			if name != sandboxd1.OptMaxBytes || !ok {
				return fmt.Errorf("option %s: unknown, or not of type t (known: MaxBytes t): %w", name, supervisor.ErrInvalid)
			}
			limit = min(max(x, 1), sandboxd1.MaxVersionBytes)
		}
		vs, err := cks.FileVersions(ctx, id, path, int(limit))
		for _, v := range vs {
			data := v.Data
			if data == nil {
				data = []byte{}
			}
			out = append(out, sandboxd1.FileVersion{Which: v.Which, Kind: v.Kind, Size: v.Size, Binary: v.Binary,
				Truncated: v.Truncated, Data: data, Note: busString(v.Note)})
		}
		return err
	})
	return out, derr
}

// Merge(s path, a{sv} options) -> (b clean, b written, a(uuuuuusss)
// hunks, ay merged): the project's change to path since the sandbox's
// base merged into the sandbox's version by diff3. A clean merge is
// written into the sandbox as the caller (the file API's write: its
// ownership and quota apply); a conflicting one is left alone, its
// hunks listed, unless Markers (b) writes it with conflict markers.
// DryRun (b) writes nothing.
func (o sandboxObject) Merge(sender dbus.Sender, msg dbus.Message, path string, opts map[string]dbus.Variant) (bool, bool, []sandboxd1.MergeHunk, []byte, *dbus.Error) {
	var res checkpoints.MergeResult
	hunks := []sandboxd1.MergeHunk{}
	derr := o.onCheckpoints(sender, msg, sandboxd1.MethodMerge, func(ctx context.Context, cks *checkpoints.Checkpoints, id string) error {
		var mo checkpoints.MergeOptions
		for name, v := range opts {
			x, ok := v.Value().(bool)
			switch {
			case name == sandboxd1.OptMarkers && ok:
				mo.Markers = x
			case name == sandboxd1.OptDryRun && ok:
				mo.DryRun = x
			default:
				return fmt.Errorf("option %s: unknown, or not of type b (known: Markers b, DryRun b): %w", name, supervisor.ErrInvalid)
			}
		}
		c := o.s.rooms.Commands
		if c == nil {
			return fmt.Errorf("merging %s: the file API, which a merge writes through, is not served by this daemon", path)
		}
		a, err := supervisor.ActorOf(ctx)
		if err != nil {
			return err
		}
		// rel is relative: the file API takes it from the project's
		// directory in the sandbox, where the versions were read.
		write := func(ctx context.Context, rel string, data []byte) error {
			return c.WriteFile(ctx, id, commands.FileAccess{UID: a.UID}, rel, data, commands.WriteOptions{NoCreate: true})
		}
		res, err = cks.Merge(ctx, id, path, mo, write)
		for _, h := range res.Hunks {
			hunks = append(hunks, sandboxd1.MergeHunk{
				SandboxStart: uint32(h.Sandbox.Start), SandboxLines: uint32(h.Sandbox.Count),
				BaseStart: uint32(h.Base.Start), BaseLines: uint32(h.Base.Count),
				ProjectStart: uint32(h.Project.Start), ProjectLines: uint32(h.Project.Count),
				Sandbox: busString(h.SandboxText), Base: busString(h.BaseText), Project: busString(h.ProjectText)})
		}
		return err
	})
	merged := res.Merged
	if merged == nil {
		merged = []byte{}
	}
	return res.Clean, res.Written, hunks, merged, derr
}
