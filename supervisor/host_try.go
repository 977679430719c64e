package supervisor

import "context"

// What the try room (supervisor/try) needs of the core beyond Host: what
// each of its sandboxes used once its check ended.

// Usage is what sandbox id uses now (Inspect's LiveUsage): its memory,
// memory peak and disk.
func (h host) Usage(ctx context.Context, id string) (Inspection, error) {
	return h.s.Inspect(ctx, id, LiveUsage)
}
