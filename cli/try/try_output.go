package try

import (
	"fmt"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/cli/verb"
	"github.com/sandboxd/sandboxd/internal/termsafe"
	"github.com/sandboxd/sandboxd/sandboxd1"
)

// print shows the results: JSON, the winner's name (--quiet), or the
// outputs (--verbose), the table, the winner and what became of the
// others.
func (t *trial) print(out verb.Output, verbose bool) error {
	results, winner := t.report.Results, t.report.Winner
	if out.Quiet && !out.AsJSON {
		if winner >= 0 {
			return out.Line("%s", results[winner].Name)
		}
		return nil
	}
	if verbose && !out.AsJSON {
		for _, r := range results {
			text := []string{"== " + r.Name + ": " + r.Result}
			for _, step := range []struct {
				what, line string
				output     *string
			}{{"command", r.Command, r.CommandOutput}, {"check", t.check, r.CheckOutput}} {
				if step.output != nil {
					// The sandbox's output: escaped line by line, so that
					// nothing in it acts on the terminal.
					lines := termsafe.Lines(*step.output, "")
					if len(lines) == 0 {
						lines = []string{"(no output)"}
					}
					text = append(append(text, "-- "+step.what+": "+termsafe.Line(step.line)), lines...)
				}
			}
			if err := out.Line("%s\n", strings.Join(text, "\n")); err != nil {
				return err
			}
		}
	}
	if !verbose {
		// The outputs are in JSON under --verbose only.
		for i := range results {
			results[i].CommandOutput, results[i].CheckOutput = nil, nil
		}
	}
	what := "VARIANT"
	if len(t.inputs) > 0 {
		what = "INPUT"
	}
	err := verb.PrintList(out, results, func(r sandboxd1.TryResult) string { return r.Name },
		[]string{"NAME", what, "RESULT", "TIME", "DIFF", "DISK", "PEAK"}, func(r sandboxd1.TryResult) []string {
			variant := r.Command
			if r.Input != nil {
				variant = *r.Input
			}
			result := r.Result
			if r.Winner {
				result += " (winner)"
			}
			diff, disk, peak := "-", "-", "-"
			if r.Changed != nil {
				diff = fmt.Sprint(*r.Changed)
				if r.Ignored > 0 {
					diff += fmt.Sprintf(" (%d left out)", r.Ignored)
				}
			}
			if r.DiskUsed != nil {
				disk = verb.BytesText(*r.DiskUsed)
			}
			if r.MemoryPeak != nil {
				peak = verb.BytesText(*r.MemoryPeak)
			}
			return []string{r.Name, shorten(termsafe.Line(variant), 40), result, seconds(time.Duration(r.Seconds * float64(time.Second))), diff, disk, peak}
		})
	if err != nil || out.AsJSON {
		return err
	}
	lines := []string{""}
	if winner >= 0 {
		w := results[winner]
		lines = append(lines, "winner: "+w.Name+" (of the passing variants, the one with the least TIME)")
		if w.Kept {
			lines = append(lines, "promote it with: sandboxctl promote "+w.Name)
		}
	}
	var kept []string
	destroyed := 0
	for _, r := range results {
		if r.Kept {
			kept = append(kept, r.Name)
		} else if r.ID != "" {
			destroyed++
		}
	}
	switch {
	case destroyed == 0:
		lines = append(lines, "kept all "+verb.Plural(len(kept), "sandbox"))
	case len(kept) == 0:
		lines = append(lines, "destroyed all "+verb.Plural(destroyed, "sandbox"))
	default:
		lines = append(lines, fmt.Sprintf("kept %s; destroyed the other %d", strings.Join(kept, ", "), destroyed))
	}
	return out.Line("%s", strings.Join(lines, "\n"))
}

// shorten fits a command line on one line of at most n runes.
func shorten(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-3]) + "..."
	}
	return s
}

// seconds is a duration for the table: 0.42s, 12.30s, 3m05s.
func seconds(d time.Duration) string {
	if d < time.Minute {
		return fmt.Sprintf("%.2fs", d.Seconds())
	}
	return d.Round(time.Second).String()
}
