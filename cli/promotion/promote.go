package promotion

import (
	"context"
	"fmt"
	"time"

	ucli "github.com/urfave/cli/v3"

	"github.com/sandboxd/sandboxd/cli/verb"
	sbclient "github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/internal/termsafe"
	"github.com/sandboxd/sandboxd/sandboxd1"
)

// Promote is `sandboxctl promote`.
func Promote() *ucli.Command {
	return &ucli.Command{
		Name:      "promote",
		Usage:     "carry what a sandbox changed to its project and on through the stages",
		ArgsUsage: "SANDBOX",
		Description: `Applies the sandbox's changes since its base to the project (data shared
by reflink), runs the stage's checks in a new sandbox of the result, and
goes on to the next stage of /etc/sandboxd/sandboxd.toml's [[stage]] list.
A path both the sandbox and the project changed since the base is a
conflict: the promotion is refused, naming each, unless --force. A failed
check takes the change back out of that stage and stops. Set-id files,
device nodes and files with capabilities are refused, naming each, unless
an admin passes --allow-privileged. A stage with approval = "admin"
waits for ` + "`sandboxctl approve`" + `. The project is never seen half promoted,
also if sandboxd dies midway.

Exit status: 0 when every stage asked for passed or the promotion waits for
an approval; 1 when a stage failed or was rejected; 4 when privileged
files are refused; 5 on a conflict.`,
		Flags: []ucli.Flag{
			&ucli.BoolFlag{Name: "force", Usage: "apply over conflicting paths (they are audited)"},
			&ucli.BoolFlag{Name: "allow-privileged", Usage: "admin only: let set-id files, device nodes and files with capabilities through (refused by default; audited)"},
			&ucli.StringFlag{Name: "to", Usage: "stop after stage `STAGE` (default: the last)"},
			&ucli.BoolFlag{Name: "no-wait", Usage: "print the promotion's id and return while the stages run"},
		},
		Action: verb.OnSandbox(1, func(ctx context.Context, cmd *ucli.Command, c *verb.Client, e sandboxd1.ListEntry, _ []string) error {
			opts := sbclient.PromoteOptions{Force: cmd.Bool("force"), To: cmd.String("to"), AllowPrivileged: cmd.Bool("allow-privileged")}
			// A record and an error: it started, and its first reading
			// failed (following it reads it again, and says so).
			p, err := c.Handle(e).Promote(ctx, opts)
			if p == nil {
				return verb.FromBus("promoting sandbox "+verb.SandboxLabel(e), err)
			}
			pid, out := p.ID, verb.OutputOf(cmd)
			if cmd.Bool("no-wait") {
				if out.AsJSON {
					return out.JSON(map[string]string{"promotion": pid})
				}
				return out.Line("%s", pid)
			}
			return followPromotion(ctx, c, out, pid)
		}),
	}
}

// getPromotion reads promotion pid's record.
func getPromotion(ctx context.Context, c *verb.Client, pid string) (sandboxd1.Promotion, error) {
	p, err := c.API.Promotion(ctx, pid)
	if err != nil {
		return sandboxd1.Promotion{}, verb.FromBus("reading promotion "+pid, err)
	}
	return *p, nil
}

// followPromotion prints a promotion's progress until it ends or waits,
// a line per step, and exits as its outcome says.
func followPromotion(ctx context.Context, c *verb.Client, out verb.Output, pid string) error {
	var seen []string // lines printed
	say := func(line string) error {
		for _, s := range seen {
			if s == line {
				return nil
			}
		}
		seen = append(seen, line)
		if out.AsJSON || out.Quiet {
			return nil
		}
		return out.Line("%s", line)
	}
	for {
		p, err := getPromotion(ctx, c, pid)
		if err != nil {
			return err
		}
		if len(seen) == 0 {
			if err := say(fmt.Sprintf("promotion %s: %s of sandbox %s (digest %s)", p.ID, verb.Plural(p.Changes, "change"), labelOf(p), p.Digest)); err != nil {
				return err
			}
			if p.Ignored > 0 {
				if err := say(verb.LeftOutLine(p.Ignored)); err != nil {
					return err
				}
			}
			if len(p.Conflicts) > 0 {
				if err := say("forced over conflicts: " + verb.QuotedPaths(p.Conflicts)); err != nil {
					return err
				}
			}
		}
		for _, st := range p.Stages {
			for _, line := range stageLines(p, st) {
				if err := say(line); err != nil {
					return err
				}
			}
		}
		if p.State != sandboxd1.PromotionRunning {
			if out.AsJSON {
				if err := out.JSON(p); err != nil {
					return err
				}
			}
			switch p.State {
			case sandboxd1.PromotionDone, sandboxd1.PromotionWaiting:
				return nil
			default:
				return &verb.Error{Code: verb.ExitFailed, Msg: fmt.Sprintf("promotion %s %s: %s", p.ID, p.State, p.Error)}
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func labelOf(p sandboxd1.Promotion) string {
	if p.SandboxName != "" {
		return p.SandboxName
	}
	return p.Sandbox
}

// stageLines are what a stage's record says, as lines to print once each.
func stageLines(p sandboxd1.Promotion, st sandboxd1.StageRun) []string {
	prefix := fmt.Sprintf("stage %s (%s): ", st.Name, st.Target)
	var lines []string
	switch st.State {
	case sandboxd1.StagePending, sandboxd1.StageSkipped:
		return nil
	case sandboxd1.StageWaiting:
		return []string{prefix + "waiting for an admin's approval: sandboxctl approve " + p.ID + " (or reject)"}
	}
	if st.Approved && st.DecidedBy != nil {
		lines = append(lines, fmt.Sprintf("%sapproved by %s", prefix, verb.UserName(*st.DecidedBy)))
	}
	lines = append(lines, prefix+"applying")
	if st.State == sandboxd1.StageApplying {
		return lines
	}
	if st.State != sandboxd1.StageRejected {
		lines = append(lines, prefix+"checking")
	}
	for _, ch := range st.Checks {
		result := "passed"
		if ch.How != "exited" || ch.Status != 0 {
			result = fmt.Sprintf("FAILED (%s, status %d)", ch.How, ch.Status)
		}
		lines = append(lines, fmt.Sprintf("  check %q: %s in %s", ch.Command, result, ch.Duration.Round(time.Millisecond)))
		if result != "passed" {
			// What the check printed is the sandbox's: each line escaped
			// and behind "| ", so that none passes for a line of ours.
			lines = append(lines, termsafe.Lines(ch.Output, "    | ")...)
		}
	}
	switch st.State {
	case sandboxd1.StagePassed:
		lines = append(lines, prefix+"passed")
	case sandboxd1.StageFailed:
		lines = append(lines, prefix+"FAILED, rolled back: "+termsafe.Text(st.Error))
	case sandboxd1.StageRejected:
		by := ""
		if st.DecidedBy != nil {
			by = " by " + verb.UserName(*st.DecidedBy)
		}
		lines = []string{prefix + "rejected" + by + ": " + termsafe.Line(st.Reason)}
	}
	return lines
}

// Promotions is `sandboxctl promotions`.
func Promotions() *ucli.Command {
	return &ucli.Command{
		Name:      "promotions",
		Usage:     "list promotions, or show one's stages, checks and approvals",
		ArgsUsage: "[PROMOTION]",
		Action: func(ctx context.Context, cmd *ucli.Command) error {
			a, err := verb.Args(cmd, 0, 1)
			if err != nil {
				return err
			}
			out := verb.OutputOf(cmd)
			return verb.WithClient(ctx, func(c *verb.Client) error {
				if len(a) == 1 {
					p, err := getPromotion(ctx, c, a[0])
					if err != nil {
						return err
					}
					if out.AsJSON {
						return out.JSON(p)
					}
					if err := out.Line("promotion %s of sandbox %s (project %s): %s, %s, started %s",
						p.ID, labelOf(p), p.Project, p.State, verb.Plural(p.Changes, "change"), p.Created.Local().Format(time.DateTime)); err != nil {
						return err
					}
					for _, st := range p.Stages {
						for _, l := range stageLines(p, st) {
							if err := out.Line("%s", l); err != nil {
								return err
							}
						}
					}
					if p.Error != "" {
						return out.Line("error: %s", termsafe.Text(p.Error))
					}
					return nil
				}
				list, err := c.API.Promotions(ctx)
				if err != nil {
					return verb.FromBus("listing promotions", err)
				}
				return verb.PrintList(out, list, func(p sandboxd1.PromotionEntry) string { return p.ID },
					[]string{"ID", "SANDBOX", "PROJECT", "STATE", "STAGE", "CHANGES", "AGE"}, func(p sandboxd1.PromotionEntry) []string {
						sb := p.SandboxName
						if sb == "" {
							sb = p.Sandbox
						}
						return []string{p.ID, sb, p.Project, p.State, p.Stage, fmt.Sprint(p.Changes), verb.Age(verb.FromMicros(p.Created))}
					})
			})
		},
	}
}

// Approve is `sandboxctl approve`.
func Approve() *ucli.Command {
	return &ucli.Command{
		Name:      "approve",
		Usage:     "let a promotion that waits go on to its next stage (admins)",
		ArgsUsage: "PROMOTION",
		Flags:     []ucli.Flag{&ucli.BoolFlag{Name: "no-wait", Usage: "return at once; do not follow the stage"}},
		Action: onPromotion(func(ctx context.Context, cmd *ucli.Command, c *verb.Client, id string) error {
			if err := c.API.ApprovePromotion(ctx, id); err != nil {
				return verb.FromBus("approving promotion "+id, err)
			}
			if cmd.Bool("no-wait") {
				return nil
			}
			return followPromotion(ctx, c, verb.OutputOf(cmd), id)
		}),
	}
}

// Reject is `sandboxctl reject`.
func Reject() *ucli.Command {
	return &ucli.Command{
		Name:      "reject",
		Usage:     "end a promotion that waits for an approval (admins)",
		ArgsUsage: "PROMOTION",
		Flags:     []ucli.Flag{&ucli.StringFlag{Name: "reason", Usage: "why, for the record"}},
		Action: onPromotion(func(ctx context.Context, cmd *ucli.Command, c *verb.Client, id string) error {
			if err := c.API.RejectPromotion(ctx, id, cmd.String("reason")); err != nil {
				return verb.FromBus("rejecting promotion "+id, err)
			}
			out := verb.OutputOf(cmd)
			if out.Quiet || out.AsJSON {
				return nil
			}
			return out.Line("promotion %s rejected", id)
		}),
	}
}

// onPromotion is the action of a verb about one promotion, by its id.
func onPromotion(fn func(ctx context.Context, cmd *ucli.Command, c *verb.Client, id string) error) ucli.ActionFunc {
	return func(ctx context.Context, cmd *ucli.Command) error {
		a, err := verb.Args(cmd, 1, 1)
		if err != nil {
			return err
		}
		return verb.WithClient(ctx, func(c *verb.Client) error { return fn(ctx, cmd, c, a[0]) })
	}
}
