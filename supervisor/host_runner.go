package supervisor

import "context"

// RunCaptured makes the core's host a Runner while running commands is
// still the core's: until the commands room runs them, whose Runner
// replaces this one (and this file goes).
func (h host) RunCaptured(ctx context.Context, id string, o ExecOptions, max int) (Captured, error) {
	return h.s.runCaptured(ctx, id, o, max)
}
