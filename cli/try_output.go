package cli

import (
	"fmt"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/internal/termsafe"
)

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	max  int
	buf  []byte
	lost int64
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - b.max; over > 0 {
		b.lost += int64(over)
		b.buf = append(b.buf[:0], b.buf[over:]...)
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	if b.lost > 0 {
		return fmt.Sprintf("[... the first %d bytes are cut ...]\n", b.lost) + string(b.buf)
	}
	return string(b.buf)
}

// print shows the results: JSON, the winner's name (--quiet), or the
// outputs (--verbose), the table, the winner and what became of the
// others.
func (t *trial) print(out output, verbose bool, winner int) error {
	if verbose {
		for i := range t.results {
			r := &t.results[i]
			r.CommandOutput, r.CheckOutput = r.commandOut, r.checkOut
		}
	}
	if out.quiet && !out.json {
		if winner >= 0 {
			return out.line("%s", t.results[winner].Name)
		}
		return nil
	}
	if verbose && !out.json {
		for _, r := range t.results {
			text := []string{"== " + r.Name + ": " + r.Result}
			for _, step := range []struct {
				what, line string
				output     *string
			}{{"command", r.Command, r.commandOut}, {"check", t.check, r.checkOut}} {
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
			if err := out.line("%s\n", strings.Join(text, "\n")); err != nil {
				return err
			}
		}
	}
	what := "VARIANT"
	if t.variants[0].input != nil {
		what = "INPUT"
	}
	err := printList(out, t.results, func(r tryResult) string { return r.Name },
		[]string{"NAME", what, "RESULT", "TIME", "DIFF", "DISK", "PEAK"}, func(r tryResult) []string {
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
			}
			if r.DiskUsed != nil {
				disk = bytesText(*r.DiskUsed)
			}
			if r.MemoryPeak != nil {
				peak = bytesText(*r.MemoryPeak)
			}
			return []string{r.Name, shorten(termsafe.Line(variant), 40), result, seconds(r.time), diff, disk, peak}
		})
	if err != nil || out.json {
		return err
	}
	lines := []string{""}
	if winner >= 0 {
		w := t.results[winner]
		lines = append(lines, "winner: "+w.Name+" (of the passing variants, the one with the least TIME)")
		if w.Kept {
			lines = append(lines, "promote it with: sandboxctl promote "+w.Name)
		}
	}
	var kept []string
	destroyed := 0
	for _, r := range t.results {
		if r.Kept {
			kept = append(kept, r.Name)
		} else if r.ID != "" {
			destroyed++
		}
	}
	switch {
	case destroyed == 0:
		lines = append(lines, fmt.Sprintf("kept all %d sandboxes", len(kept)))
	case len(kept) == 0:
		lines = append(lines, fmt.Sprintf("destroyed all %d sandboxes", destroyed))
	default:
		lines = append(lines, fmt.Sprintf("kept %s; destroyed the other %d", strings.Join(kept, ", "), destroyed))
	}
	return out.line("%s", strings.Join(lines, "\n"))
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
