// Package limits is the room of the bounds over many sandboxes: those of
// all sandboxes together (sandboxd.slice) and of each owner's (its
// slice), set as the daemon starts (ApplyUserLimits), and what an owner
// uses of them and of the admission caps (Usage, GetLimits), the slices'
// usage read from systemd at most once a SliceUsageTTL.
//
// The core still sets an owner's bounds on its slice before each of its
// scopes starts; this room sets them on the slices already there.
package limits
