package checkpoints

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	ucli "github.com/urfave/cli/v3"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/cli/verb"
	sbclient "github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/internal/termsafe"
	"github.com/sandboxd/sandboxd/sandboxd1"
)

// Checkpoint is `sandboxctl checkpoint`.
func Checkpoint() *ucli.Command {
	return &ucli.Command{
		Name:      "checkpoint",
		Usage:     "take a named checkpoint of a sandbox (its files and its system layer), or delete one",
		ArgsUsage: "SANDBOX NAME",
		Description: `Takes a read-only snapshot of the sandbox's copy of the project and of
its system layer (what it changed in /usr, /etc, ...), at one instant (the
sandbox is frozen for it). Roll back to it with ` + "`sandboxctl rollback`" + `.`,
		Flags: []ucli.Flag{&ucli.BoolFlag{Name: "delete", Usage: "delete checkpoint NAME instead"}},
		Action: verb.OnSandbox(2, func(ctx context.Context, cmd *ucli.Command, c *verb.Client, e sandboxd1.ListEntry, rest []string) error {
			sb, out := c.Handle(e), verb.OutputOf(cmd)
			if cmd.Bool("delete") {
				if err := sb.DeleteCheckpoint(ctx, rest[0]); err != nil {
					return verb.FromBus("deleting checkpoint "+rest[0]+" of sandbox "+e.ID, err)
				}
				if out.AsJSON {
					return out.JSON(map[string]string{"sandbox": e.ID, "deleted": rest[0]})
				}
				if out.Quiet {
					return nil
				}
				return out.Line("deleted checkpoint %s of sandbox %s", rest[0], e.ID)
			}
			created, err := sb.Checkpoint(ctx, rest[0])
			if err != nil {
				return verb.FromBus("taking checkpoint "+rest[0]+" of sandbox "+e.ID, err)
			}
			switch {
			case out.AsJSON:
				return out.JSON(map[string]any{"sandbox": e.ID, "checkpoint": rest[0], "created": created})
			case out.Quiet:
				return nil
			}
			return out.Line("checkpoint %s of sandbox %s taken", rest[0], e.ID)
		}),
	}
}

// Checkpoints is `sandboxctl checkpoints`.
func Checkpoints() *ucli.Command {
	return &ucli.Command{
		Name:      "checkpoints",
		Usage:     "list a sandbox's checkpoints",
		ArgsUsage: "SANDBOX",
		Action: verb.OnSandbox(1, func(ctx context.Context, cmd *ucli.Command, c *verb.Client, e sandboxd1.ListEntry, _ []string) error {
			list, err := c.Handle(e).Checkpoints(ctx)
			if err != nil {
				return verb.FromBus("listing the checkpoints of sandbox "+e.ID, err)
			}
			return verb.PrintList(verb.OutputOf(cmd), list, func(ck sandboxd1.CheckpointEntry) string { return ck.Name },
				[]string{"NAME", "TAKEN", "COVERS"}, func(ck sandboxd1.CheckpointEntry) []string {
					covers := "files and system layer"
					if !ck.Layer {
						covers = "files (the system layer is in memory)"
					}
					return []string{ck.Name, verb.FromMicros(ck.Created).Local().Format(time.DateTime), covers}
				})
		}),
	}
}

// Rollback is `sandboxctl rollback`.
func Rollback() *ucli.Command {
	return &ucli.Command{
		Name:      "rollback",
		Usage:     "bring a sandbox back to a checkpoint (its processes are stopped, it starts again)",
		ArgsUsage: "SANDBOX NAME",
		Description: `Stops every process of the sandbox, brings its files and its system
layer back to checkpoint NAME, and starts it again: the same sandbox, id,
limits and time to live. Later checkpoints stay.`,
		Action: verb.OnSandbox(2, func(ctx context.Context, cmd *ucli.Command, c *verb.Client, e sandboxd1.ListEntry, rest []string) error {
			if err := c.Handle(e).Rollback(ctx, rest[0]); err != nil {
				return verb.FromBus("rolling sandbox "+e.ID+" back to "+rest[0], err)
			}
			out := verb.OutputOf(cmd)
			switch {
			case out.AsJSON:
				return out.JSON(map[string]string{"sandbox": e.ID, "rolled_back_to": rest[0]})
			case out.Quiet:
				return nil
			}
			return out.Line("sandbox %s is back at checkpoint %s (its processes were stopped; it runs again)", e.ID, rest[0])
		}),
	}
}

// Diff is `sandboxctl diff`.
func Diff() *ucli.Command {
	return &ucli.Command{
		Name:      "diff",
		Usage:     "what a sandbox changed in its project since its base",
		ArgsUsage: "SANDBOX",
		Flags: []ucli.Flag{&ucli.BoolFlag{Name: "text", Aliases: []string{"u"},
			Usage: "a unified text diff of the changed files, as git shows it (binary files named as such)"}},
		Action: verb.OnSandbox(1, func(ctx context.Context, cmd *ucli.Command, c *verb.Client, e sandboxd1.ListEntry, _ []string) error {
			sb := c.Handle(e)
			if cmd.Bool("text") {
				text, err := sb.UnifiedDiff(ctx, sbclient.UnifiedDiffOptions{})
				if err != nil {
					return verb.FromBus("diffing sandbox "+e.ID, err)
				}
				if err := verb.Written(writeDiffText(cmd.Root().Writer, text)); err != nil {
					return err
				}
				// The text may go to git apply: the count goes to stderr.
				if _, ignored, err := sb.DiffCounted(ctx); err == nil && ignored > 0 {
					fmt.Fprintln(cmd.Root().ErrWriter, verb.LeftOutLine(ignored))
				}
				return nil
			}
			changes, ignored, err := sb.DiffCounted(ctx)
			if err != nil {
				return verb.FromBus("listing the changes of sandbox "+e.ID, err)
			}
			out := verb.OutputOf(cmd)
			if out.AsJSON {
				if changes == nil {
					changes = []sandboxd1.ChangeEntry{}
				}
				return out.JSON(changes)
			}
			marks := map[string]string{"added": "A", "modified": "M", "deleted": "D", "renamed": "R", "metadata": "m"}
			for _, ch := range changes {
				// A sandbox chose these names: quoted as git quotes them,
				// so none can act on the terminal or fake a line.
				p := termsafe.Path(ch.Path)
				if ch.Type == "dir" {
					p = termsafe.Path(ch.Path + "/")
				}
				if ch.NewPath != "" {
					p += " -> " + termsafe.Path(ch.NewPath)
				}
				if out.Quiet {
					p = termsafe.Path(ch.Path)
				} else {
					p = marks[ch.Kind] + " " + p
				}
				if err := out.Line("%s", p); err != nil {
					return err
				}
			}
			if out.Quiet {
				return nil
			}
			if len(changes) == 0 {
				if err := out.Line("no changes since the base"); err != nil {
					return err
				}
			}
			if ignored > 0 {
				return out.Line("%s", verb.LeftOutLine(ignored))
			}
			return nil
		}),
	}
}

// writeDiffText writes a unified diff. Its names come quoted from the
// daemon (as git quotes them); its lines are the files' own bytes, which
// go as they are to a file or a pipe (git apply, patch), but to a
// terminal each line is made safe (tabs and backslashes kept), so that a
// file's escape sequences or carriage returns cannot hide or fake lines of
// the diff a reviewer reads.
func writeDiffText(w io.Writer, text string) error {
	if !isTerminal(w) {
		_, err := io.WriteString(w, text)
		return err
	}
	var b strings.Builder
	for l := range strings.Lines(text) {
		body, nl := strings.CutSuffix(l, "\n")
		b.WriteString(termsafe.Text(body))
		if nl {
			b.WriteByte('\n')
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// isTerminal reports whether w is a terminal (where text a sandbox made
// must not reach raw).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}
