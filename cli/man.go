package cli

import (
	"context"
	"fmt"
	"io"
	"strings"

	ucli "github.com/urfave/cli/v3"

	"github.com/sandboxd/sandboxd/cli/verb"
)

// urfave/cli v3 dropped v2's ToMan (it moved to a separate module), so
// the man page is written here from the same command tree --help reads.

func manCommand() *ucli.Command {
	return &ucli.Command{
		Name:   "man",
		Usage:  "print sandboxctl's man page (roff), for packaging: sandboxctl man > sandboxctl.1",
		Hidden: true,
		Action: func(_ context.Context, cmd *ucli.Command) error {
			return verb.Written(WriteMan(cmd.Root().Writer, cmd.Root()))
		},
	}
}

// WriteMan writes root's man page, section 1.
func WriteMan(w io.Writer, root *ucli.Command) error {
	var b strings.Builder
	fmt.Fprintf(&b, ".TH SANDBOXCTL 1 \"\" \"sandboxctl %s\" \"User Commands\"\n", roff(root.Version))
	fmt.Fprintf(&b, ".SH NAME\nsandboxctl \\- %s\n", roff(root.Usage))
	b.WriteString(".SH SYNOPSIS\n.B sandboxctl\n[\\fB\\-\\-json\\fR] [\\fB\\-\\-quiet\\fR] \\fICOMMAND\\fR [\\fIOPTIONS\\fR] [\\fIARGS\\fR]\n")
	desc, codes, _ := strings.Cut(root.Description, "EXIT STATUS")
	fmt.Fprintf(&b, ".SH DESCRIPTION\n%s\n", paragraphs(desc))
	b.WriteString(".SH OPTIONS\n")
	writeFlags(&b, root.VisibleFlags())
	b.WriteString(".SH COMMANDS\n")
	for _, c := range root.VisibleCommands() {
		writeCommand(&b, c, "")
	}
	fmt.Fprintf(&b, ".SH EXIT STATUS\n.nf\n%s\n.fi\n", roff(strings.Trim(codes, "\n")))
	b.WriteString(".SH FILES\n/etc/sandboxd/sandboxd.toml \\- the daemon's configuration (projects, profiles, limits, access)\n")
	b.WriteString(".SH SEE ALSO\n.BR sandboxd (8),\n.BR systemctl (1),\n.BR busctl (1)\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func writeCommand(b *strings.Builder, c *ucli.Command, parent string) {
	name := strings.TrimSpace(parent + " " + c.Name)
	if c.Name == "help" {
		return
	}
	fmt.Fprintf(b, ".TP\n.B %s", roff(name))
	if len(c.VisibleFlags()) > 0 {
		b.WriteString(" \\fR[\\fIoptions\\fR]")
	}
	if c.ArgsUsage != "" {
		fmt.Fprintf(b, " \\fI%s\\fR", roff(c.ArgsUsage))
	}
	fmt.Fprintf(b, "\n%s\n", roff(c.Usage))
	if c.Description != "" {
		fmt.Fprintf(b, ".IP\n%s\n", paragraphs(c.Description))
	}
	if flags := c.VisibleFlags(); len(flags) > 0 {
		b.WriteString(".RS\n")
		writeFlags(b, flags)
		b.WriteString(".RE\n")
	}
	for _, sub := range c.VisibleCommands() {
		writeCommand(b, sub, name)
	}
}

func writeFlags(b *strings.Builder, flags []ucli.Flag) {
	for _, f := range flags {
		names := f.Names()
		if names[0] == "help" || names[0] == "version" {
			continue
		}
		var parts []string
		for _, n := range names {
			dashes := "\\-\\-"
			if len(n) == 1 {
				dashes = "\\-"
			}
			parts = append(parts, "\\fB"+dashes+roff(n)+"\\fR")
		}
		usage := ""
		if d, ok := f.(ucli.DocGenerationFlag); ok {
			usage = d.GetUsage()
			if def := d.GetDefaultText(); def != "" {
				usage += " (default: " + def + ")"
			}
			if d.TakesValue() {
				parts[len(parts)-1] += " \\fIvalue\\fR"
			}
		}
		fmt.Fprintf(b, ".TP\n%s\n%s\n", strings.Join(parts, ", "), roff(usage))
	}
}

// paragraphs turns blank-line separated text into roff paragraphs.
func paragraphs(s string) string {
	var out []string
	for p := range strings.SplitSeq(strings.TrimSpace(s), "\n\n") {
		out = append(out, roff(strings.Join(strings.Fields(p), " ")))
	}
	return strings.Join(out, "\n.PP\n")
}

// roff escapes text for roff: backslashes, leading dots and quotes, and
// hyphens that must stay hyphens.
func roff(s string) string {
	s = strings.ReplaceAll(s, "\\", "\\e")
	s = strings.ReplaceAll(s, "-", "\\-")
	var lines []string
	for l := range strings.SplitSeq(s, "\n") {
		if strings.HasPrefix(l, ".") || strings.HasPrefix(l, "'") {
			l = "\\&" + l
		}
		lines = append(lines, l)
	}
	return strings.Join(lines, "\n")
}
