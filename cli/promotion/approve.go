package promotion

// What an approver sees: a promotion's change in a line, as a diff, and
// the question before an approval.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	ucli "github.com/urfave/cli/v3"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/cli/verb"
	sbclient "github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/internal/termsafe"
	"github.com/sandboxd/sandboxd/sandboxd1"
)

// summaryPaths is how many changed paths a summary line names.
const summaryPaths = 5

// changeSummary says what promotion p changes, in a line: "1 change:
// modified calc.py", "7 changes: added a, deleted b, ... and 2 more".
// The paths are the sandbox's: quoted as git quotes them.
func changeSummary(p sandboxd1.Promotion) string {
	s := verb.Plural(p.Changes, "change")
	var parts []string
	for _, c := range p.Changed[:min(len(p.Changed), summaryPaths)] {
		part := c.Kind + " " + termsafe.Path(c.Path)
		if c.Kind == "metadata" {
			part = "metadata of " + termsafe.Path(c.Path)
		}
		if c.NewPath != "" {
			part += " -> " + termsafe.Path(c.NewPath)
		}
		parts = append(parts, part)
	}
	if len(parts) == 0 {
		return s
	}
	s += ": " + strings.Join(parts, ", ")
	if more := p.Changes - len(parts); more > 0 {
		s += fmt.Sprintf(" and %d more", more)
	}
	return s
}

// waitingStage is the stage p waits at for an approval ("" if none).
func waitingStage(p sandboxd1.Promotion) string {
	for _, st := range p.Stages {
		if st.State == sandboxd1.StageWaiting {
			return fmt.Sprintf("%s (%s)", st.Name, st.Target)
		}
	}
	return ""
}

// diffShown is a promotion's diff as --json prints it.
type diffShown struct {
	Promotion string `json:"promotion"`
	Sandbox   string `json:"sandbox"`
	Project   string `json:"project"`
	State     string `json:"state"`
	Changes   int    `json:"changes"`
	Digest    string `json:"digest"`
	Diff      string `json:"diff"`
}

// showWaiting shows the diff of each promotion of list that waits for an
// approval.
func showWaiting(ctx context.Context, cmd *ucli.Command, c *verb.Client, list []sandboxd1.PromotionEntry) error {
	var ps []sandboxd1.Promotion
	for _, e := range list {
		if e.State != sandboxd1.PromotionWaiting {
			continue
		}
		p, err := getPromotion(ctx, c, e.ID)
		if err != nil {
			return err
		}
		ps = append(ps, p)
	}
	out := verb.OutputOf(cmd)
	if len(ps) == 0 && !out.AsJSON {
		return out.Line("no promotion waits for an approval")
	}
	return showDiffs(ctx, cmd, c, ps)
}

// showDiffs shows each promotion's change: a line of what it is and what
// it changes, its digest and how to approve it, and its diff, escaped.
func showDiffs(ctx context.Context, cmd *ucli.Command, c *verb.Client, ps []sandboxd1.Promotion) error {
	out := verb.OutputOf(cmd)
	shown := []diffShown{}
	for i, p := range ps {
		text, digest, err := c.API.PromotionDiff(ctx, p.ID, sbclient.UnifiedDiffOptions{})
		if err != nil {
			return verb.FromBus("diffing promotion "+p.ID, err)
		}
		if out.AsJSON {
			shown = append(shown, diffShown{Promotion: p.ID, Sandbox: p.Sandbox, Project: p.Project, State: p.State, Changes: p.Changes, Digest: digest, Diff: text})
			continue
		}
		if i > 0 {
			if err := out.Line(""); err != nil {
				return err
			}
		}
		if err := showDiff(out.W, p, text, digest); err != nil {
			return err
		}
	}
	if out.AsJSON {
		return out.JSON(shown)
	}
	return nil
}

// showDiff writes promotion p's header and its diff text (of the change
// whose digest is digest) to w.
func showDiff(w io.Writer, p sandboxd1.Promotion, text, digest string) error {
	state := p.State
	if st := waitingStage(p); st != "" {
		state += " at stage " + st
	}
	var b strings.Builder
	fmt.Fprintf(&b, "promotion %s of sandbox %s (project %s): %s, %s\n", p.ID, termsafe.Line(labelOf(p)), p.Project, state, changeSummary(p))
	fmt.Fprintf(&b, "digest %s", digest)
	if p.State == sandboxd1.PromotionWaiting {
		fmt.Fprintf(&b, "; to approve this change and no other: sandboxctl approve %s --yes --digest %s", p.ID, digest)
	}
	b.WriteString("\n\n")
	// The diff is the sandbox's files: each line escaped (tabs kept),
	// whatever the output is, so that none acts on a terminal or a pager.
	b.WriteString(termsafe.Output(text))
	if text != "" && !strings.HasSuffix(text, "\n") {
		b.WriteByte('\n')
	}
	if warning := unseen(text); warning != "" {
		b.WriteString("\n" + warning + "\n")
	}
	_, err := io.WriteString(w, b.String())
	return verb.Written(err)
}

// unseen says, when diff text does not show the whole change (files
// whose content the reader could not read, a diff cut at its bound),
// that its digest, which an approval names, covers what is not shown
// too: a requester may hide a file's content from the approver (a mode
// only he may read) or put it past the cut. Such lines start no line of
// a file's content, which a diff prefixes.
func unseen(text string) string {
	hidden, cut := 0, false
	for line := range strings.Lines(text) {
		switch {
		case strings.HasPrefix(line, "Content not shown: "):
			hidden++
		case strings.HasPrefix(line, "... the diff is cut here"):
			cut = true
		}
	}
	var parts []string
	if hidden > 0 {
		parts = append(parts, "the content of "+verb.Plural(hidden, "file")+" not shown to you")
	}
	if cut {
		parts = append(parts, "the diff cut before its end")
	}
	if len(parts) == 0 {
		return ""
	}
	return "warning: this diff does not show the whole change (" + strings.Join(parts, "; ") +
		"): the digest, and an approval, cover what is not shown too"
}

// Approve is `sandboxctl approve`.
func Approve() *ucli.Command {
	return &ucli.Command{
		Name:      "approve",
		Usage:     "let a promotion that waits go on to its next stage (admins), after seeing its change",
		ArgsUsage: "PROMOTION",
		Description: `Shows the promotion's change (a unified diff of what it would carry,
escaped) and asks before approving it; the approval names the digest of
the change shown, and the daemon refuses it if the promotion's change is
another. Without a terminal to ask on, pass --yes, after reading the
change with ` + "`sandboxctl promotions --diff PROMOTION`" + `, and --digest with the
digest it showed, to approve that change and no other.

Exit status: 0 approved (and, unless --no-wait, every stage asked for
passed or the next waits); 1 not approved (the answer was no) or a stage
failed; 2 no terminal and no --yes; 4 not an admin; 5 the change differs
from the digest given, or the promotion does not wait.`,
		Flags: []ucli.Flag{
			&ucli.BoolFlag{Name: "yes", Aliases: []string{"y"}, Usage: "approve without asking (read the change first: sandboxctl promotions --diff)"},
			&ucli.StringFlag{Name: "digest", Usage: "approve only the change whose digest is `DIGEST` (as promotions --diff shows it)"},
			&ucli.BoolFlag{Name: "no-wait", Usage: "return at once; do not follow the stage"},
		},
		Action: onPromotion(func(ctx context.Context, cmd *ucli.Command, c *verb.Client, id string) error {
			out := verb.OutputOf(cmd)
			digest := cmd.String("digest")
			if !cmd.Bool("yes") {
				in, ok := cmd.Root().Reader.(*os.File)
				if !ok || !isTerminal(in) || out.AsJSON || out.Quiet {
					return &verb.Error{Code: verb.ExitUsage,
						Msg: fmt.Sprintf("approving promotion %s: there is no terminal to ask on", id),
						Fix: fmt.Sprintf("read the change first (sandboxctl promotions --diff %s), then approve it with: sandboxctl approve %s --yes --digest DIGEST", id, id)}
				}
				p, err := getPromotion(ctx, c, id)
				if err != nil {
					return err
				}
				if p.State != sandboxd1.PromotionWaiting {
					return &verb.Error{Code: verb.ExitConflict, Msg: fmt.Sprintf("promotion %s is %s, not waiting for an approval", id, p.State)}
				}
				text, shown, err := c.API.PromotionDiff(ctx, id, sbclient.UnifiedDiffOptions{})
				if err != nil {
					return verb.FromBus("diffing promotion "+id, err)
				}
				if digest != "" && digest != shown {
					return &verb.Error{Code: verb.ExitConflict,
						Msg: fmt.Sprintf("approving promotion %s: the change differs from what you saw (digest %s; it is %s)", id, digest, shown),
						Fix: "look again with sandboxctl promotions --diff " + id}
				}
				digest = shown
				if err := showDiff(out.W, p, text, digest); err != nil {
					return err
				}
				yes, err := ask(in, cmd.Root().ErrWriter, fmt.Sprintf("approve promotion %s (digest %s) for stage %s? [y/N] ", id, digest, waitingStage(p)))
				if err != nil {
					return err
				}
				if !yes {
					return &verb.Error{Code: verb.ExitFailed, Msg: fmt.Sprintf("promotion %s not approved: it still waits (sandboxctl reject %s ends it)", id, id)}
				}
			}
			var err error
			if digest != "" {
				err = c.API.ApprovePromotionDigest(ctx, id, digest)
			} else {
				err = c.API.ApprovePromotion(ctx, id)
			}
			if err != nil {
				return verb.FromBus("approving promotion "+id, err)
			}
			if cmd.Bool("no-wait") {
				return nil
			}
			return followPromotion(ctx, c, out, id)
		}),
	}
}

// ask asks question on w and reads a line of in: yes for "y" or "yes".
func ask(in io.Reader, w io.Writer, question string) (bool, error) {
	if _, err := io.WriteString(w, question); err != nil {
		return false, verb.Written(err)
	}
	line, err := bufio.NewReader(in).ReadString('\n')
	if err != nil && err != io.EOF {
		return false, &verb.Error{Code: verb.ExitFailed, Msg: "reading the answer: " + err.Error(), Err: err}
	}
	answer := strings.ToLower(strings.TrimSpace(line))
	return answer == "y" || answer == "yes", nil
}

// isTerminal reports whether f is a terminal.
func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}
