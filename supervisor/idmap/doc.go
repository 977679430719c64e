// Package idmap is the pure part of a sandbox's user namespace: the
// block of host ids a sandbox holds (chosen from the configured range,
// clear of the blocks other sandboxes hold and of the host's own ids),
// the id maps made of it (the whole one its copy is idmapped through, the
// narrow one the host root's layers are shown through), a command's
// identity checked against them, and the host's directories as such a
// namespace sees them: the state directories a sandbox could not read
// and the packaged log directories a booted sandbox gets.
//
// The policy, whether sandboxes get user namespaces at all, is
// supervisor/userns's; the core says when to allocate, and which refusal
// an error here is. This package knows nothing of the core.
package idmap
