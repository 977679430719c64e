package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/mcpserver/toolcall"
	"github.com/sandboxd/sandboxd/sandboxd1"
)

// The tools about what a sandbox changed: diff, checkpoint, rollback,
// rebase, and try (several sandboxes side by side).

type diffIn struct {
	Sandbox string `json:"sandbox" jsonschema:"the sandbox: its id, its name, or the start of its id"`
	Text    bool   `json:"text,omitempty" jsonschema:"return the changes as a unified diff (as git diff shows it) instead of a list"`
	Context int    `json:"context,omitempty" jsonschema:"with text: lines of context around each change (default 3)"`
}

type changeEntry struct {
	Kind    string `json:"kind" jsonschema:"added, modified, deleted, renamed or metadata"`
	Type    string `json:"type" jsonschema:"file, dir, symlink, ..."`
	Path    string `json:"path"`
	NewPath string `json:"new_path,omitempty" jsonschema:"where a renamed path went"`
}

// diffOut is what diff returns; with text, the unified diff is in the
// text content alone, once.
type diffOut struct {
	Changes []changeEntry `json:"changes,omitempty" jsonschema:"what changed since the sandbox was made, a path an entry"`
	Text    string        `json:"-"`
	Bytes   int           `json:"text_bytes,omitempty" jsonschema:"with text: how long the unified diff in the text content is"`
	Ignored int           `json:"ignored,omitempty" jsonschema:"how many changed paths the project's ignore rules (.sandboxignore) left out: they never leave the sandbox"`
	Notes   []string      `json:"notes,omitempty"`
}

type checkpointIn struct {
	Sandbox string `json:"sandbox" jsonschema:"the sandbox: its id, its name, or the start of its id"`
	Name    string `json:"name" jsonschema:"a name for the checkpoint, unique in the sandbox"`
}

type rollbackIn struct {
	Sandbox string `json:"sandbox" jsonschema:"the sandbox: its id, its name, or the start of its id"`
	Name    string `json:"name" jsonschema:"the checkpoint to go back to (sandbox_status lists the sandbox's checkpoints)"`
}

type checkpointOut struct {
	Name    string `json:"name"`
	Created string `json:"created"`
}

type rollbackOut struct {
	Sandbox    string `json:"sandbox"`
	Checkpoint string `json:"checkpoint" jsonschema:"the checkpoint the sandbox is back at"`
}

type rebaseOut struct {
	Sandbox string `json:"sandbox"`
	Rebased bool   `json:"rebased"`
}

type tryIn struct {
	Project  string   `json:"project,omitempty" jsonschema:"the project to try them in (with from: the sandbox's, the default)"`
	From     string   `json:"from,omitempty" jsonschema:"a sandbox (its id or name) whose forks the variants run in, rather than new sandboxes of the project: what it set up is there in each"`
	Variants []string `json:"variants" jsonschema:"the approaches, each a shell line run in a sandbox of its own"`
	Check    string   `json:"check" jsonschema:"a shell line run after each variant in its sandbox: exit status 0 is a pass"`
	Keep     string   `json:"keep,omitempty" jsonschema:"which sandboxes stay: winner (the default: the passing one that took least time), all, or none"`
	Network  string   `json:"network,omitempty" jsonschema:"each sandbox's network: none, allowlist or host; default: the profile's"`
	Allow    []string `json:"allow,omitempty" jsonschema:"with network allowlist: what each may reach"`
	Timeout  int      `json:"timeout_seconds,omitempty" jsonschema:"bound each variant and each check (default 600)"`
}

// errRebaseConflict marks a rebase's conflict, whose hint is not to
// rebase (ErrConflict's, for promote, is).
var errRebaseConflict = errors.New("the rebase was not done")

func (s *server) addChangeTools(m *mcp.Server) {
	add(s, m, &mcp.Tool{Name: "diff", Annotations: readOnly("Show changes"),
		Description: fmt.Sprintf("Show what a sandbox changed since it was made: a list of changed paths, or with text a unified diff (at most %d KiB).", s.opts.MaxDiffBytes>>10)},
		s.diff)
	add(s, m, &mcp.Tool{Name: "checkpoint", Annotations: additive("Take a checkpoint"),
		Description: "Take a named checkpoint of a sandbox (its files and its system), to roll back to."},
		s.checkpoint)
	add(s, m, &mcp.Tool{Name: "rollback", Annotations: &mcp.ToolAnnotations{Title: "Roll back to a checkpoint", DestructiveHint: new(true), IdempotentHint: true, OpenWorldHint: new(false)},
		Description: "Bring a sandbox back to a checkpoint: its processes are stopped, and what changed since the checkpoint is lost."},
		s.rollback)
	add(s, m, &mcp.Tool{Name: "rebase", Annotations: destructive("Rebase onto the project"),
		Description: "Bring a sandbox onto its project as it is now, keeping the sandbox's own changes; its processes are stopped. A path both changed is a conflict: the sandbox is then left as it was."},
		s.rebase)
	add(s, m, &mcp.Tool{Name: "try", Annotations: runsCode("Try approaches side by side"),
		Description: "Run several approaches side by side: a sandbox of the project per variant (with from, a fork of that sandbox), the variant and then the check in each. Returns each one's result and output, and the winner (the passing one that took least time), whose sandbox is kept to promote."},
		s.try)
}

func (s *server) diff(ctx context.Context, in diffIn) (diffOut, error) {
	sb, err := s.sandbox(ctx, in.Sandbox)
	if err != nil {
		return diffOut{}, err
	}
	if in.Text {
		lines := in.Context
		if in.Context < 0 {
			return diffOut{}, invalidf("context is %d lines: give 0 or more", in.Context)
		}
		if lines == 0 {
			lines = 3
		}
		text, err := sb.UnifiedDiff(ctx, client.UnifiedDiffOptions{Context: lines, MaxBytes: s.opts.MaxDiffBytes})
		if err != nil {
			return diffOut{}, err
		}
		out := diffOut{Text: text, Bytes: len(text)}
		if _, out.Ignored, err = sb.DiffCounted(ctx); err != nil {
			return diffOut{}, err
		}
		linkDiff(ctx, sb, text)
		if text == "" {
			out.Notes = append(out.Notes, "the sandbox changed nothing")
		}
		if t, binary := utf8Text([]byte(text)); binary {
			out.Text = t
			out.Notes = append(out.Notes, "the diff is not all UTF-8 text: its invalid bytes are shown as U+FFFD")
		}
		return out, nil
	}
	changes, ignored, err := sb.DiffCounted(ctx)
	if err != nil {
		return diffOut{}, err
	}
	out := diffOut{Changes: []changeEntry{}, Ignored: ignored}
	for _, c := range changes {
		out.Changes = append(out.Changes, changeEntry(c))
	}
	if len(changes) == 0 {
		out.Notes = append(out.Notes, "the sandbox changed nothing")
	}
	if ignored > 0 {
		out.Notes = append(out.Notes, plural(ignored, "changed path")+" left out by the project's ignore rules (.sandboxignore): they are neither listed nor promoted")
	}
	return out, nil
}

// text is a unified diff under a line saying its size; "" for a list
// (its JSON is the text).
func (o diffOut) text() string {
	if o.Changes != nil {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "a unified diff of %s", plural(o.Bytes, "byte"))
	if o.Ignored > 0 {
		fmt.Fprintf(&b, "; %s left out by the project's ignore rules (.sandboxignore)", plural(o.Ignored, "changed path"))
	}
	b.WriteString("\n")
	writeSection(&b, "diff", o.Text)
	writeNotes(&b, o.Notes)
	return b.String()
}

func (s *server) checkpoint(ctx context.Context, in checkpointIn) (checkpointOut, error) {
	sb, err := s.sandbox(ctx, in.Sandbox)
	if err != nil {
		return checkpointOut{}, err
	}
	at, err := sb.Checkpoint(ctx, in.Name)
	if err != nil {
		return checkpointOut{}, err
	}
	return checkpointOut{Name: in.Name, Created: timeText(at)}, nil
}

func (s *server) rollback(ctx context.Context, in rollbackIn) (rollbackOut, error) {
	sb, err := s.sandbox(ctx, in.Sandbox)
	if err != nil {
		return rollbackOut{}, err
	}
	// Its sessions end with its processes.
	s.repl.forget(sb.ID())
	if err := sb.Rollback(ctx, in.Name); err != nil {
		return rollbackOut{}, err
	}
	return rollbackOut{Sandbox: sb.ID(), Checkpoint: in.Name}, nil
}

func (s *server) rebase(ctx context.Context, in sandboxArg) (rebaseOut, error) {
	sb, err := s.sandbox(ctx, in.Sandbox)
	if err != nil {
		return rebaseOut{}, err
	}
	s.repl.forget(sb.ID())
	if err := sb.Rebase(ctx); err != nil {
		if errors.Is(err, client.ErrConflict) {
			return rebaseOut{}, fmt.Errorf("%w (%w)", err, errRebaseConflict)
		}
		return rebaseOut{}, err
	}
	return rebaseOut{Sandbox: sb.ID(), Rebased: true}, nil
}

func (s *server) try(ctx context.Context, in tryIn) (sandboxd1.TryReport, error) {
	if len(in.Variants) == 0 {
		return sandboxd1.TryReport{}, invalidf("variants is empty: give at least one shell line")
	}
	switch in.Keep {
	case "", sandboxd1.KeepWinner, sandboxd1.KeepAll, sandboxd1.KeepNone:
	default:
		return sandboxd1.TryReport{}, invalidf("keep %q is none of winner, all, none", in.Keep)
	}
	timeout, err := seconds(in.Timeout, 10*time.Minute, s.opts.MaxExecTimeout, "timeout_seconds")
	if err != nil {
		return sandboxd1.TryReport{}, err
	}
	opts := client.TryOptions{Create: client.CreateOptions{Network: in.Network, Allow: in.Allow}, Timeout: timeout}
	project := in.Project
	switch {
	case in.From != "":
		// The forks are of the sandbox's project: it is the default,
		// and the sandbox is named to the daemon by its id, found once.
		sb, err := s.sandbox(ctx, in.From)
		if err != nil {
			return sandboxd1.TryReport{}, err
		}
		opts.From = sb.ID()
		if project == "" {
			project = sb.Project()
		}
	case project == "":
		return sandboxd1.TryReport{}, invalidf("project is not given: give the project to try the variants in, or from, a sandbox whose forks they run in")
	}
	opts.OnVariant = toolcall.TryVariants(ctx, len(in.Variants))
	report, err := s.c.Try(ctx, project, in.Variants, in.Check, in.Keep, opts)
	if err != nil {
		return sandboxd1.TryReport{}, err
	}
	return *report, nil
}
