// Package promote carries what a sandbox changed back to its project and on
// through the configured stages: diff against the base, conflict check,
// checkpoint, apply, checks, approval, and rollback on failure.
package promote
