package client

import (
	"context"
	"fmt"

	"github.com/godbus/dbus/v5"

	"github.com/sandboxd/sandboxd/sandboxd1"
)

// Conflicts: a conflicting path's three versions, and a three-way merge.

// FileVersions returns the three versions of path (relative to the
// project's top, as a rebase's or a promotion's conflict names it): the
// base's (what the sandbox was made from, or last rebased onto), the
// project's as it is now, and the sandbox's, in that order. maxBytes
// bounds each (0: sandboxd1.MaxVersionBytes, the most). Only a regular
// file the caller could read on the host has content; a symlink is
// named, never followed.
func (s *Sandbox) FileVersions(ctx context.Context, path string, maxBytes uint64) ([]sandboxd1.FileVersion, error) {
	o := map[string]dbus.Variant{}
	if maxBytes > 0 {
		o[sandboxd1.OptMaxBytes] = dbus.MakeVariant(maxBytes)
	}
	var vs []sandboxd1.FileVersion
	err := s.call(ctx, fmt.Sprintf("reading the versions of %q in", path), sandboxd1.MethodFileVersions, []any{path, o}, &vs)
	return vs, err
}

// MergeOptions are what Merge does with a merge.
type MergeOptions struct {
	// Markers writes a merge that conflicts with conflict markers
	// (<<<<<<< sandbox, =======, >>>>>>> project); without it such a
	// merge leaves the file alone.
	Markers bool
	// DryRun writes nothing.
	DryRun bool
}

// MergeResult is how a merge went.
type MergeResult struct {
	Clean   bool                  // no hunk conflicts
	Written bool                  // the sandbox's file was written
	Hunks   []sandboxd1.MergeHunk // the conflicting hunks
	Merged  []byte                // the merged text, with markers where it conflicts
}

// Merge merges the project's change to path since the sandbox's base
// into the sandbox's version (diff3, line by line). A clean merge is
// written into the sandbox as the caller; one that conflicts leaves the
// file as it is and lists the hunks, unless o.Markers.
func (s *Sandbox) Merge(ctx context.Context, path string, o MergeOptions) (MergeResult, error) {
	opts := map[string]dbus.Variant{}
	if o.Markers {
		opts[sandboxd1.OptMarkers] = dbus.MakeVariant(true)
	}
	if o.DryRun {
		opts[sandboxd1.OptDryRun] = dbus.MakeVariant(true)
	}
	var r MergeResult
	err := s.call(ctx, fmt.Sprintf("merging %q in", path), sandboxd1.MethodMerge, []any{path, opts}, &r.Clean, &r.Written, &r.Hunks, &r.Merged)
	return r, err
}
