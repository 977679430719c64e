package client

import (
	"context"
	"encoding/json"
	"fmt"

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

// Pool is a warm pool as ListPools shows it (sandboxd1.Pool).
type Pool = sandboxd1.Pool

// ListPools lists the warm pools the caller may see (its own; every
// owner's for root and admins): `sandboxctl pools`.
func (c *Client) ListPools(ctx context.Context) ([]Pool, error) {
	var js string
	if err := c.callManager(ctx, "listing the warm pools", sandboxd1.MethodListPools, nil, &js); err != nil {
		return nil, err
	}
	var out []Pool
	if err := json.Unmarshal([]byte(js), &out); err != nil {
		return nil, fmt.Errorf("listing the warm pools: the daemon's answer: %w", err)
	}
	return out, nil
}
