package checkpoints

import (
	"context"
	"fmt"
	"io"
	"strings"

	ucli "github.com/urfave/cli/v3"

	"github.com/sandboxd/sandboxd/cli/verb"
	sbclient "github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/internal/termsafe"
	"github.com/sandboxd/sandboxd/sandboxd1"
)

// Versions is `sandboxctl versions`.
func Versions() *ucli.Command {
	return &ucli.Command{
		Name:      "versions",
		Usage:     "show a conflicting path's three versions: the base's, the project's and the sandbox's",
		ArgsUsage: "SANDBOX PATH",
		Description: `PATH is relative to the project's top, as a rebase's or a promotion's
conflict names it. Shows the base's version (what the sandbox was made
from, or last rebased onto), the project's as it is now, and the
sandbox's, each at most 1 MiB. With --which, only that version's bytes go
to stdout, as they are (for a file, or diff3). Only a regular file the
caller could read on the host is shown; a symlink is named, never
followed. Merge them with ` + "`sandboxctl merge`" + `.`,
		Flags: []ucli.Flag{&ucli.StringFlag{Name: "which", Usage: "print only this version's bytes: base, project or sandbox"}},
		Action: verb.OnSandbox(2, func(ctx context.Context, cmd *ucli.Command, c *verb.Client, e sandboxd1.ListEntry, rest []string) error {
			which := cmd.String("which")
			if which != "" && which != sandboxd1.VersionBase && which != sandboxd1.VersionProject && which != sandboxd1.VersionSandbox {
				return verb.Usage("--which %s: give base, project or sandbox", termsafe.Line(which))
			}
			vs, err := c.Handle(e).FileVersions(ctx, rest[0], 0)
			if err != nil {
				return verb.FromBus(fmt.Sprintf("reading the versions of %q in sandbox %s", rest[0], e.ID), err)
			}
			out := verb.OutputOf(cmd)
			if which != "" {
				for _, v := range vs {
					if v.Which != which {
						continue
					}
					if v.Kind != sandboxd1.VersionFile {
						code := verb.ExitFailed
						if v.Kind == sandboxd1.VersionAbsent {
							code = verb.ExitNotFound
						}
						return &verb.Error{Code: code, Msg: fmt.Sprintf("the %s's version of %s is %s: %s", which, rest[0], v.Kind, v.Note)}
					}
					if v.Truncated {
						return &verb.Error{Code: verb.ExitFailed, Msg: fmt.Sprintf("the %s's version of %s is %d bytes, over the %d shown", which, rest[0], v.Size, len(v.Data))}
					}
					_, err := cmd.Root().Writer.Write(v.Data)
					return verb.Written(err)
				}
				return &verb.Error{Code: verb.ExitFailed, Msg: "the daemon sent no " + which + " version"}
			}
			if out.AsJSON {
				return out.JSON(vs) // data as base64
			}
			return verb.Written(printVersions(cmd.Root().Writer, rest[0], vs))
		}),
	}
}

// printVersions shows each version under a header, its text escaped
// where a terminal would act on it.
func printVersions(w io.Writer, path string, vs []sandboxd1.FileVersion) error {
	var b strings.Builder
	for _, v := range vs {
		switch {
		case v.Kind != sandboxd1.VersionFile:
			fmt.Fprintf(&b, "=== %s: %s (%s)\n", v.Which, v.Kind, termsafe.Text(v.Note))
			continue
		case v.Binary:
			fmt.Fprintf(&b, "=== %s: binary file, %d bytes: not shown (--which %s > FILE writes it)\n", v.Which, v.Size, v.Which)
			continue
		}
		fmt.Fprintf(&b, "=== %s: %s, %d bytes\n", v.Which, termsafe.Path(path), v.Size)
		text := string(v.Data)
		b.WriteString(termsafe.Output(strings.TrimSuffix(text, "\n")) + "\n")
		if v.Truncated {
			fmt.Fprintf(&b, "[... cut at %d of %d bytes ...]\n", len(v.Data), v.Size)
		} else if !strings.HasSuffix(text, "\n") && text != "" {
			b.WriteString("\\ No newline at end of file\n")
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// Merge is `sandboxctl merge`.
func Merge() *ucli.Command {
	return &ucli.Command{
		Name:      "merge",
		Usage:     "merge the project's change to a conflicting path into the sandbox's version (three-way, diff3)",
		ArgsUsage: "SANDBOX PATH",
		Description: `Merges, line by line with diff3, what the project changed in PATH since
the sandbox's base into the sandbox's version. A clean merge is written
into the sandbox as you (its file ownership and quota apply). Where both
changed the same lines, the file is left as it was and the conflicting
hunks are listed, each version's lines and text (exit 5); --markers
writes it with conflict markers instead (<<<<<<< sandbox, =======,
>>>>>>> project) for you to edit. --dry-run writes nothing and prints the
merged text. Text files of at most 1 MiB merge; see the versions with
` + "`sandboxctl versions`" + `.`,
		Flags: []ucli.Flag{
			&ucli.BoolFlag{Name: "markers", Usage: "write a merge that conflicts, with conflict markers"},
			&ucli.BoolFlag{Name: "dry-run", Usage: "write nothing: print the merged text"},
		},
		Action: verb.OnSandbox(2, func(ctx context.Context, cmd *ucli.Command, c *verb.Client, e sandboxd1.ListEntry, rest []string) error {
			path := rest[0]
			res, err := c.Handle(e).Merge(ctx, path, sbclient.MergeOptions{Markers: cmd.Bool("markers"), DryRun: cmd.Bool("dry-run")})
			if err != nil {
				return verb.FromBus(fmt.Sprintf("merging %q in sandbox %s", path, e.ID), err)
			}
			out := verb.OutputOf(cmd)
			switch {
			case out.AsJSON:
				hunks := res.Hunks
				if hunks == nil {
					hunks = []sandboxd1.MergeHunk{}
				}
				if err := out.JSON(map[string]any{"sandbox": e.ID, "path": path, "clean": res.Clean, "written": res.Written, "hunks": hunks}); err != nil {
					return err
				}
			case cmd.Bool("dry-run"):
				if err := writeDiffText(cmd.Root().Writer, string(res.Merged)); err != nil {
					return verb.Written(err)
				}
			case out.Quiet:
			case res.Clean && res.Written:
				if err := out.Line("merged %s in sandbox %s: the project's changes and the sandbox's, written", termsafe.Path(path), e.ID); err != nil {
					return err
				}
			case res.Clean:
				if err := out.Line("%s in sandbox %s holds the project's changes already: nothing written", termsafe.Path(path), e.ID); err != nil {
					return err
				}
			default:
				if err := verb.Written(printHunks(cmd.Root().Writer, res.Hunks)); err != nil {
					return err
				}
			}
			if res.Clean || res.Written {
				if !res.Clean && !out.AsJSON && !out.Quiet {
					return out.Line("written with conflict markers around %s: edit them out, then run the tests", verb.Plural(len(res.Hunks), "hunk"))
				}
				return nil
			}
			fix := "edit the file in the sandbox to hold both changes, or run again with --markers to write it with conflict markers"
			if cmd.Bool("dry-run") {
				fix = "run without --dry-run to write it"
			}
			return &verb.Error{Code: verb.ExitConflict, Msg: fmt.Sprintf("%s: %s changed in both the sandbox and the project; the file is left as it was", path, verb.Plural(len(res.Hunks), "hunk")), Fix: fix}
		}),
	}
}

// printHunks shows each conflicting hunk's three versions.
func printHunks(w io.Writer, hunks []sandboxd1.MergeHunk) error {
	var b strings.Builder
	lines := func(start, n uint32) string {
		switch n {
		case 0:
			return fmt.Sprintf("after line %d", start)
		case 1:
			return fmt.Sprintf("line %d", start)
		}
		return fmt.Sprintf("lines %d-%d", start, start+n-1)
	}
	for i, h := range hunks {
		fmt.Fprintf(&b, "conflict %d:\n", i+1)
		for _, side := range []struct {
			name, text string
			start, n   uint32
		}{{"sandbox", h.Sandbox, h.SandboxStart, h.SandboxLines}, {"base", h.Base, h.BaseStart, h.BaseLines}, {"project", h.Project, h.ProjectStart, h.ProjectLines}} {
			fmt.Fprintf(&b, "  %s, %s:\n", side.name, lines(side.start, side.n))
			for _, l := range termsafe.Lines(side.text, "    | ") {
				b.WriteString(l + "\n")
			}
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
