package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/godbus/dbus/v5"

	"github.com/sandboxd/sandboxd/promote/unidiff"
	"github.com/sandboxd/sandboxd/sandboxd1"
	"github.com/sandboxd/sandboxd/supervisor"
	"github.com/sandboxd/sandboxd/supervisor/api/access"
	"github.com/sandboxd/sandboxd/supervisor/api/options"
	"github.com/sandboxd/sandboxd/supervisor/promotion"
)

// errNoPromotions answers a promotion where the daemon serves no
// promotions.
var errNoPromotions = errors.New("this daemon promotes nothing")

// Promote(a{sv} options) -> (s promotion) starts promoting the sandbox's
// changes through the stages. Options: Force (b) applies over conflicts;
// To (s) is the last stage to go to; AllowPrivileged (b), for an admin
// only, lets set-id files, device nodes and files with capabilities
// through (refused by default, naming each); AllowEmpty (b) answers a
// sandbox that changed nothing with an empty id, not WrongState. It
// returns once the change
// set is known and free of conflicts; the stages run on, and
// GetPromotion tells where they are.
func (o sandboxObject) Promote(sender dbus.Sender, msg dbus.Message, opts map[string]dbus.Variant) (string, *dbus.Error) {
	s := o.s
	r, derr := s.begin(sender, "Promote")
	if derr != nil {
		return "", derr
	}
	id, derr := objectID(msg)
	if derr != nil {
		return "", s.end(r, "", derr)
	}
	if _, derr := s.lookup(r, id); derr != nil {
		return "", s.end(r, id, derr)
	}
	if s.rooms.Promotion == nil {
		return "", s.end(r, id, fromSupervisor(errNoPromotions))
	}
	po, allowEmpty, err := options.Promote(r.who.UID, opts)
	if err != nil {
		return "", s.end(r, id, fromSupervisor(err))
	}
	if po.AllowPrivileged && !r.who.Admin {
		return "", s.end(r, id, dbusError(sandboxd1.ErrorAccessDenied,
			"promoting sandbox %s: only an admin may allow set-id files, device nodes and file capabilities into a project; uid %d is not one", id, r.who.UID))
	}
	p, err := s.rooms.Promotion.Promote(r.ctx, id, po)
	if allowEmpty && errors.Is(err, promotion.ErrNothingToPromote) {
		return "", s.end(r, id, nil)
	}
	if errors.Is(err, promotion.ErrPrivileged) {
		return p.ID, s.end(r, id, dbus.NewError(sandboxd1.ErrorAccessDenied, []any{err.Error()}))
	}
	if err != nil {
		return p.ID, s.end(r, id, fromSupervisor(err))
	}
	return p.ID, s.end(r, id, nil)
}

// visiblePromotion says whether the caller may see promotion p: its own,
// or any for an admin.
func visiblePromotion(who access.Caller, p promotion.Promotion) bool {
	return who.Admin || p.Owner == who.UID
}

// ListPromotions() -> a(ssssssut): the promotions the caller may see,
// oldest first.
func (m manager) ListPromotions(sender dbus.Sender) ([]sandboxd1.PromotionEntry, *dbus.Error) {
	s := m.s
	r, derr := s.begin(sender, "ListPromotions")
	if derr != nil {
		return nil, derr
	}
	if s.rooms.Promotion == nil {
		return nil, s.end(r, "", fromSupervisor(errNoPromotions))
	}
	ps, err := s.rooms.Promotion.List(r.ctx)
	if err != nil {
		return nil, s.end(r, "", fromSupervisor(err))
	}
	out := []sandboxd1.PromotionEntry{}
	for _, p := range ps {
		if !visiblePromotion(r.who, p) {
			continue
		}
		out = append(out, sandboxd1.PromotionEntry{
			ID: p.ID, Sandbox: p.Sandbox, SandboxName: p.SandboxName, Project: p.Project,
			State: string(p.State), Stage: currentStage(p), Changes: uint32(p.Changes), Created: micros(p.Created),
		})
	}
	return out, s.end(r, "", nil)
}

// currentStage is the stage a promotion is at: the first not passed.
func currentStage(p promotion.Promotion) string {
	for _, st := range p.Stages {
		if st.State != "passed" && st.State != "skipped" {
			return st.Name
		}
	}
	if len(p.Stages) == 0 {
		return ""
	}
	return p.Stages[len(p.Stages)-1].Name
}

// GetPromotion(s id) -> (s record): the promotion's whole record as JSON
// (docs/dbus-api.md shows its fields): each stage's state, checks with
// the end of their output, approvals, conflicts.
func (m manager) GetPromotion(sender dbus.Sender, id string) (string, *dbus.Error) {
	s := m.s
	r, derr := s.begin(sender, "GetPromotion")
	if derr != nil {
		return "", derr
	}
	p, derr := s.promotion(r, id)
	if derr != nil {
		return "", s.end(r, "", derr)
	}
	data, err := json.Marshal(wirePromotion(p))
	if err != nil {
		return "", s.end(r, "", fromSupervisor(err))
	}
	return string(data), s.end(r, "", nil)
}

// promotion returns promotion id if the caller may see it.
func (s *Server) promotion(r *request, id string) (promotion.Promotion, *dbus.Error) {
	if !sandboxd1.ValidID(id) {
		return promotion.Promotion{}, dbusError(sandboxd1.ErrorInvalidArgs, "%q is not a promotion id", id)
	}
	if s.rooms.Promotion == nil {
		return promotion.Promotion{}, dbusError(sandboxd1.ErrorNoSuchPromotion, "no promotion %q", id)
	}
	p, err := s.rooms.Promotion.Get(r.ctx, id)
	if err != nil || !visiblePromotion(r.who, p) {
		return p, dbusError(sandboxd1.ErrorNoSuchPromotion, "no promotion %q", id)
	}
	return p, nil
}

// ApprovePromotion(s id): an admin lets a promotion that waits go on to
// its next stage.
func (m manager) ApprovePromotion(sender dbus.Sender, id string) *dbus.Error {
	return m.decide(sender, "ApprovePromotion", id, func(ctx context.Context, uid uint32) error {
		_, err := m.s.rooms.Promotion.Approve(ctx, id, uid)
		return err
	})
}

// ApprovePromotionWithOptions(s id, a{sv} options): ApprovePromotion,
// with Digest (s): the digest of the change the admin saw
// (PromotionDiff's), refused (WrongState) when the promotion's change
// is another. (ApprovePromotion's signature is published: options need
// a method of their own.)
func (m manager) ApprovePromotionWithOptions(sender dbus.Sender, id string, opts map[string]dbus.Variant) *dbus.Error {
	return m.decide(sender, "ApprovePromotionWithOptions", id, func(ctx context.Context, uid uint32) error {
		digest := ""
		for name, v := range opts {
			str, ok := v.Value().(string)
			switch {
			case name != sandboxd1.OptDigest:
				return fmt.Errorf("unknown option %q (known: Digest): %w", name, supervisor.ErrInvalid)
			case !ok:
				return fmt.Errorf("option Digest has type %s; want s: %w", v.Signature(), supervisor.ErrInvalid)
			}
			digest = str
		}
		if digest == "" {
			_, err := m.s.rooms.Promotion.Approve(ctx, id, uid)
			return err
		}
		_, err := m.s.rooms.Promotion.ApproveDigest(ctx, id, uid, digest)
		return err
	})
}

// PromotionDiff(s id, a{sv} options) -> (s diff, s digest): what the
// promotion carries, as a unified text diff read from its frozen source
// (UnifiedDiff's options: Context u, MaxBytes t), and the digest of that
// change, which ApprovePromotionWithOptions takes. The promotion's
// owner and admins may read it, until it is finished.
func (m manager) PromotionDiff(sender dbus.Sender, id string, opts map[string]dbus.Variant) (string, string, *dbus.Error) {
	s := m.s
	r, derr := s.begin(sender, "PromotionDiff")
	if derr != nil {
		return "", "", derr
	}
	p, derr := s.promotion(r, id)
	if derr != nil {
		return "", "", s.end(r, "", derr)
	}
	lines, most, err := options.UnifiedDiff(opts)
	if err != nil {
		return "", "", s.end(r, p.Sandbox, fromSupervisor(err))
	}
	var out strings.Builder
	p, err = s.rooms.Promotion.Diff(r.ctx, id, &out, unidiff.Options{Context: lines, MaxBytes: most})
	if err != nil {
		return "", "", s.end(r, p.Sandbox, fromSupervisor(err))
	}
	return busString(out.String()), p.Digest, s.end(r, p.Sandbox, nil)
}

// RejectPromotion(s id, s reason): an admin ends a promotion that waits.
func (m manager) RejectPromotion(sender dbus.Sender, id, reason string) *dbus.Error {
	return m.decide(sender, "RejectPromotion", id, func(ctx context.Context, uid uint32) error {
		_, err := m.s.rooms.Promotion.Reject(ctx, id, uid, reason)
		return err
	})
}

func (m manager) decide(sender dbus.Sender, action, id string, fn func(ctx context.Context, uid uint32) error) *dbus.Error {
	s := m.s
	r, derr := s.begin(sender, action)
	if derr != nil {
		return derr
	}
	p, derr := s.promotion(r, id)
	if derr != nil {
		return s.end(r, "", derr)
	}
	if !r.who.Admin {
		return s.end(r, p.Sandbox, dbusError(sandboxd1.ErrorAccessDenied,
			"%s %s: uid %d may not decide on promotions (only root and admins may: [access] admin_users, admin_groups)",
			strings.ToLower(strings.TrimSuffix(action, "Promotion")), id, r.who.UID))
	}
	if err := fn(r.ctx, r.who.UID); err != nil {
		return s.end(r, p.Sandbox, fromSupervisor(err))
	}
	return s.end(r, p.Sandbox, nil)
}
