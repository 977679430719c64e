// Package sandboxes is sandboxctl's verbs about sandboxes as wholes: create,
// list, status, freeze, thaw, destroy and gc; the ports a sandbox exposes,
// and the bounds (limits) and cache a caller's sandboxes share.
package sandboxes
