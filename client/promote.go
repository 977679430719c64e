package client

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/sandboxd/sandboxd/sandboxd1"
)

// PromoteOptions are how a promotion goes.
type PromoteOptions struct {
	// Force applies over the paths the project changed too since the
	// sandbox's base (they are audited); without it they are
	// ErrConflict, each named.
	Force bool
	// To is the last stage to go to; "" is the last of sandboxd.toml's.
	To string
	// AllowPrivileged lets set-id files and device nodes through; for
	// admins only.
	AllowPrivileged bool
	// AllowEmpty: a sandbox that changed nothing since its base is
	// ErrNothingToPromote (which is also ErrWrongState), told apart from
	// a sandbox in the wrong state (a daemon from before asks for it).
	AllowEmpty bool
}

// ErrNothingToPromote: the sandbox changed nothing since its base
// (PromoteOptions.AllowEmpty); nothing was recorded. It matches
// ErrWrongState too, as a daemon's answer without AllowEmpty does.
var ErrNothingToPromote = fmt.Errorf("nothing to promote: %w", ErrWrongState)

// Promote starts carrying the sandbox's changes since its base through
// the stages (the project alone by default), and returns the
// promotion's record as it is once the daemon has the change set and
// found no conflict; the stages then run in the daemon (WaitPromotion
// follows them). Nothing to promote is ErrWrongState (and
// ErrNothingToPromote with AllowEmpty); a conflict,
// ErrConflict; another promotion of the project under way, ErrBusy.
func (s *Sandbox) Promote(ctx context.Context, opts PromoteOptions) (*sandboxd1.Promotion, error) {
	o := map[string]dbus.Variant{}
	if opts.Force {
		o[sandboxd1.OptForce] = dbus.MakeVariant(true)
	}
	if opts.To != "" {
		o[sandboxd1.OptTo] = dbus.MakeVariant(opts.To)
	}
	if opts.AllowPrivileged {
		o[sandboxd1.OptAllowPrivileged] = dbus.MakeVariant(true)
	}
	if opts.AllowEmpty {
		o[sandboxd1.OptAllowEmpty] = dbus.MakeVariant(true)
	}
	var id string
	if err := s.call(ctx, "promoting", sandboxd1.MethodPromote, []any{o}, &id); err != nil {
		return nil, err
	}
	if id == "" {
		return nil, fmt.Errorf("promoting %s: %w: it has no changes since its base", s.label(), ErrNothingToPromote)
	}
	p, err := s.c.Promotion(ctx, id)
	if err != nil {
		return &sandboxd1.Promotion{ID: id, Sandbox: s.id}, err
	}
	return p, nil
}

// Promotion reads a promotion's record: its state, and each stage's
// state, checks and approval.
func (c *Client) Promotion(ctx context.Context, id string) (*sandboxd1.Promotion, error) {
	op := "reading promotion " + id
	var record string
	if err := c.callManager(ctx, op, sandboxd1.MethodGetPromotion, []any{id}, &record); err != nil {
		return nil, err
	}
	var p sandboxd1.Promotion
	if err := json.Unmarshal([]byte(record), &p); err != nil {
		return nil, fmt.Errorf("%s: the daemon's record: %w", op, err)
	}
	return &p, nil
}

// WaitPromotion follows a promotion until it no longer runs, and returns
// its record then. Its State says how it stands: sandboxd1.PromotionDone
// (every stage asked for passed), PromotionFailed (a stage failed and
// was rolled back; Error says why), PromotionRejected (an admin said no)
// or PromotionWaiting (a stage waits for an admin's approval, which may
// never come: WaitPromotion returns rather than wait for a person).
func (c *Client) WaitPromotion(ctx context.Context, id string) (*sandboxd1.Promotion, error) {
	pause := 50 * time.Millisecond
	for {
		p, err := c.Promotion(ctx, id)
		if err != nil || p.State != sandboxd1.PromotionRunning {
			return p, err
		}
		select {
		case <-ctx.Done():
			return p, fmt.Errorf("waiting for promotion %s: %w", id, ctx.Err())
		case <-time.After(pause):
		}
		pause = min(2*pause, time.Second)
	}
}

// Promotions lists the promotions the caller may see (its own; every one
// for an admin), oldest first.
func (c *Client) Promotions(ctx context.Context) ([]sandboxd1.PromotionEntry, error) {
	var list []sandboxd1.PromotionEntry
	err := c.callManager(ctx, "listing promotions", sandboxd1.MethodListPromotions, nil, &list)
	return list, err
}

// ApprovePromotion lets a promotion that waits for an admin go on to its
// stage. Admins only (ErrAccessDenied otherwise); one that does not wait
// is ErrWrongState.
func (c *Client) ApprovePromotion(ctx context.Context, id string) error {
	return c.callManager(ctx, "approving promotion "+id, sandboxd1.MethodApprovePromotion, []any{id})
}

// ApprovePromotionDigest is ApprovePromotion of the change whose digest
// the admin saw (PromotionDiff's): refused, ErrWrongState, when the
// promotion's change is another.
func (c *Client) ApprovePromotionDigest(ctx context.Context, id, digest string) error {
	o := map[string]dbus.Variant{sandboxd1.OptDigest: dbus.MakeVariant(digest)}
	return c.callManager(ctx, "approving promotion "+id, sandboxd1.MethodApprovePromotionWithOptions, []any{id, o})
}

// PromotionDiff is what promotion id carries, as a unified diff read
// from its frozen source (as Sandbox.UnifiedDiff shows a sandbox's), and
// the digest of that change, for ApprovePromotionDigest. The text is the
// sandbox's: escape it before it reaches a terminal. The promotion's
// owner and admins may read it until it is finished.
func (c *Client) PromotionDiff(ctx context.Context, id string, opts UnifiedDiffOptions) (text, digest string, err error) {
	o := opts.wire()
	err = c.callManager(ctx, "diffing promotion "+id, sandboxd1.MethodPromotionDiff, []any{id, o}, &text, &digest)
	return text, digest, err
}

// RejectPromotion ends a promotion that waits for an admin, as rejected
// with reason. Admins only.
func (c *Client) RejectPromotion(ctx context.Context, id, reason string) error {
	return c.callManager(ctx, "rejecting promotion "+id, sandboxd1.MethodRejectPromotion, []any{id, reason})
}
