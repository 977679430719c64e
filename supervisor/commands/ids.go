package commands

import "github.com/sandboxd/sandboxd/internal/randid"

// newID is a short random id: a command's, a process's, a session's.
func newID() string {
	return randid.Hex(4)
}
