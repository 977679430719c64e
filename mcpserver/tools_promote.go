package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/sandboxd1"
)

// Promotion: carrying a sandbox's changes into its project through the
// stages. There is no tool that approves or rejects a stage: that is an
// administrator's, by sandboxctl, never an agent's.

type promoteIn struct {
	Sandbox string `json:"sandbox" jsonschema:"the sandbox whose changes to promote"`
	To      string `json:"to,omitempty" jsonschema:"the last stage to go to (default: every stage)"`
	Wait    int    `json:"wait_seconds,omitempty" jsonschema:"how long to wait for the stages (default 120); past it the promotion goes on, and promotion_status follows it"`
}

type promotionIn struct {
	Promotion string `json:"promotion" jsonschema:"the promotion's id, as promote returned it"`
}

type promotionOut struct {
	Promotion string `json:"promotion" jsonschema:"its id"`
	Sandbox   string `json:"sandbox"`
	Project   string `json:"project"`
	// State is sandboxd1's Promotion* values.
	State     string     `json:"state" jsonschema:"running, waiting (for an administrator's approval), done, failed (and rolled back) or rejected"`
	Changes   int        `json:"changes" jsonschema:"how many paths it carries"`
	Stages    []stageOut `json:"stages"`
	Conflicts []string   `json:"conflicts,omitempty" jsonschema:"paths the project changed too"`
	Error     string     `json:"error,omitempty"`
	Message   string     `json:"message" jsonschema:"what this means, and what can be done"`
}

type stageOut struct {
	Name   string     `json:"name"`
	Target string     `json:"target" jsonschema:"where it writes: project, a path, or a host over ssh"`
	State  string     `json:"state" jsonschema:"pending, waiting, applying, checking, passed, failed, rejected or skipped"`
	Checks []checkOut `json:"checks,omitempty"`
	Error  string     `json:"error,omitempty"`
	Reason string     `json:"reason,omitempty" jsonschema:"an administrator's reason for a rejection"`
}

type checkOut struct {
	Command  string `json:"command"`
	ExitCode int    `json:"exit_code"`
	How      string `json:"how"`
	Output   string `json:"output,omitempty" jsonschema:"its last lines"`
}

func (s *server) addPromoteTools(m *mcp.Server) {
	add(s, m, &mcp.Tool{Name: "promote", Annotations: destructive("Promote changes into the project"),
		Description: "Carry a sandbox's changes into its project through the host's stages (each may run checks; a failed one is rolled back), and wait for them a while. " +
			"A stage that needs an administrator's approval leaves the promotion waiting: no tool can approve it, an administrator must (sandboxctl approve). " +
			"Paths the project changed too since the sandbox was made are a conflict (rebase first)."},
		s.promote)
	add(s, m, &mcp.Tool{Name: "promotion_status", Annotations: readOnly("Promotion status"),
		Description: "Show how a promotion stands: its state, each stage's state and checks."},
		s.promotionStatus)
}

func (s *server) promote(ctx context.Context, in promoteIn) (promotionOut, error) {
	wait, err := seconds(in.Wait, s.opts.PromoteWait, s.opts.MaxPromoteWait, "wait_seconds")
	if err != nil {
		return promotionOut{}, err
	}
	sb, err := s.sandbox(ctx, in.Sandbox)
	if err != nil {
		return promotionOut{}, err
	}
	p, err := sb.Promote(ctx, client.PromoteOptions{To: in.To})
	if err != nil {
		if errors.Is(err, client.ErrWrongState) && strings.Contains(err.Error(), "nothing") {
			return promotionOut{}, fmt.Errorf("%w\n(diff shows what the sandbox changed: there is nothing to promote)", err)
		}
		return promotionOut{}, err
	}
	waitCtx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	p2, err := s.followPromotion(waitCtx, p.ID)
	switch {
	case err == nil:
		p = p2
	case waitCtx.Err() != nil && ctx.Err() == nil:
		// Still running past the wait: it goes on in the daemon.
		if p2 != nil {
			p = p2
		}
		out := promotionOf(p)
		out.Message = fmt.Sprintf("promotion %s still runs after %s; it goes on without you: promotion_status %s tells how it ends", p.ID, wait, p.ID)
		return out, nil
	default:
		return promotionOut{}, fmt.Errorf("promotion %s started; following it: %w", p.ID, err)
	}
	return promotionOf(p), nil
}

func (s *server) promotionStatus(ctx context.Context, in promotionIn) (promotionOut, error) {
	p, err := s.c.Promotion(ctx, in.Promotion)
	if err != nil {
		return promotionOut{}, err
	}
	return promotionOf(p), nil
}

// promotionOf is a promotion's record as a tool tells it, with what its
// state means.
func promotionOf(p *sandboxd1.Promotion) promotionOut {
	out := promotionOut{Promotion: p.ID, Sandbox: p.Sandbox, Project: p.Project, State: p.State, Changes: p.Changes,
		Conflicts: p.Conflicts, Error: p.Error, Stages: []stageOut{}}
	var waiting, failed []string
	for _, st := range p.Stages {
		so := stageOut{Name: st.Name, Target: st.Target, State: st.State, Error: st.Error, Reason: st.Reason}
		for _, c := range st.Checks {
			so.Checks = append(so.Checks, checkOut{Command: c.Command, ExitCode: c.Status, How: c.How, Output: c.Output})
		}
		out.Stages = append(out.Stages, so)
		switch st.State {
		case sandboxd1.StageWaiting:
			waiting = append(waiting, st.Name)
		case sandboxd1.StageFailed:
			failed = append(failed, st.Name)
		}
	}
	switch p.State {
	case sandboxd1.PromotionDone:
		what := fmt.Sprintf("%d changes", p.Changes)
		if p.Changes == 1 {
			what = "1 change"
		}
		out.Message = fmt.Sprintf("done: the project %s has the sandbox's %s", p.Project, what)
	case sandboxd1.PromotionWaiting:
		out.Message = fmt.Sprintf("waiting: stage %s needs an administrator's approval. An administrator must run `sandboxctl approve %s` "+
			"(or `sandboxctl reject %s`); no tool can approve it, and promoting again will not help. promotion_status %s tells when it was decided.",
			strings.Join(waiting, ", "), p.ID, p.ID, p.ID)
	case sandboxd1.PromotionFailed:
		out.Message = fmt.Sprintf("failed: stage %s failed and was rolled back, so it is as it was (the stages before it keep the changes); "+
			"the checks' output says why: fix it in the sandbox and promote again", strings.Join(failed, ", "))
	case sandboxd1.PromotionRejected:
		out.Message = "rejected by an administrator; the stages rejected got none of the changes"
	case sandboxd1.PromotionRunning:
		out.Message = fmt.Sprintf("running: promotion_status %s tells how it goes on", p.ID)
	}
	return out
}
