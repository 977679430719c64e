// Package cli is sandboxctl, the command line that talks to sandboxd over
// D-Bus: its command tree (New, in help's order), Run with its exit codes,
// the man page written from the tree, and mcp, which serves mcpserver.
// The verbs live in packages by what they are about (sandboxes, commands,
// checkpoints, promotion, try, projects), each written with cli/verb: the
// connection, output, errors and exit codes they share.
package cli
