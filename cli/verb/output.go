package verb

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	ucli "github.com/urfave/cli/v3"
)

// Output is how a verb prints: a table, JSON, or only ids.
type Output struct {
	W      io.Writer
	AsJSON bool
	Quiet  bool
}

// OutputOf is how cmd prints, by the root's --json and --quiet.
func OutputOf(cmd *ucli.Command) Output {
	return Output{W: cmd.Root().Writer, AsJSON: cmd.Bool("json"), Quiet: cmd.Bool("quiet")}
}

// JSON prints v as indented JSON, its times as RFC 3339 (jsonTimes).
func (o Output) JSON(v any) error {
	enc := json.NewEncoder(o.W)
	enc.SetIndent("", "  ")
	return Written(enc.Encode(jsonTimes(v)))
}

// Table prints rows under a header, aligned.
func (o Output) Table(header []string, rows [][]string) error {
	tw := tabwriter.NewWriter(o.W, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	return Written(tw.Flush())
}

// Line prints format and a newline.
func (o Output) Line(format string, a ...any) error {
	_, err := fmt.Fprintf(o.W, format+"\n", a...)
	return Written(err)
}

// Written reports a failed write of the output (a closed stdout).
func Written(err error) error {
	if err != nil {
		return &Error{Code: ExitFailed, Msg: "writing the output: " + err.Error(), Err: err}
	}
	return nil
}

// PrintList prints items as JSON, as a name a line (--quiet), or as a
// table under header.
func PrintList[T any](out Output, items []T, name func(T) string, header []string, row func(T) []string) error {
	if out.AsJSON {
		if items == nil {
			items = []T{}
		}
		return out.JSON(items)
	}
	if out.Quiet {
		for _, it := range items {
			if err := out.Line("%s", name(it)); err != nil {
				return err
			}
		}
		return nil
	}
	rows := [][]string{}
	for _, it := range items {
		rows = append(rows, row(it))
	}
	return out.Table(header, rows)
}
