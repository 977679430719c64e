package client

import (
	"context"

	"github.com/sandboxd/sandboxd/sandboxd1"
)

// Bounds is what the caller uses of each bound on its sandboxes, and what
// all sandboxes together use of theirs: sandboxd1.Limits, whose ...Max
// fields are 0 for no bound and whose used amounts are sandboxd1.Unknown
// when the host's cgroups do not count them.
type Bounds = sandboxd1.Limits

// Bounds asks the daemon for the caller's use of its bounds (GetLimits):
// `sandboxctl limits`.
func (c *Client) Bounds(ctx context.Context) (Bounds, error) {
	var l Bounds
	err := c.callManager(ctx, "reading the limits", sandboxd1.MethodGetLimits, nil, &l)
	return l, err
}
