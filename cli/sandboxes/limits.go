package sandboxes

import (
	"context"
	"fmt"
	"strings"

	ucli "github.com/urfave/cli/v3"

	"github.com/sandboxd/sandboxd/cli/verb"
	"github.com/sandboxd/sandboxd/sandboxd1"
)

// Limits is `sandboxctl limits`.
func Limits() *ucli.Command {
	return &ucli.Command{
		Name:  "limits",
		Usage: "show what you use of each bound on your sandboxes, and what all sandboxes use of theirs",
		Description: `Your sandboxes together are bounded in memory and tasks (processes and
threads) by [limits] user_memory_max and user_tasks_max (a quarter of the
machine's by default), and in number by max_sandboxes_per_user; all
sandboxes together by slice_memory_max and slice_tasks_max (three quarters
of the machine's), max_sandboxes, and max_memory for the MemoryMax promised
to them. A fork or an allocation past your bound fails in your sandbox,
however much its own limits allow; a create past a count is refused.`,
		Action: func(ctx context.Context, cmd *ucli.Command) error {
			if _, err := verb.Args(cmd, 0, 0); err != nil {
				return err
			}
			return verb.WithClient(ctx, func(c *verb.Client) error {
				l, err := c.API.Bounds(ctx)
				if err != nil {
					return verb.FromBus("reading your limits", err)
				}
				out := verb.OutputOf(cmd)
				if out.AsJSON {
					return out.JSON(limitsJSON(l))
				}
				return out.Table([]string{"BOUND", "USED", "LIMIT", "USE", "SET BY"}, limitsRows(l))
			})
		},
	}
}

// limitsRows are the table's rows: each bound, what is used of it, the
// bound ("none" when there is none) and the share used.
func limitsRows(l sandboxd1.Limits) [][]string {
	var rows [][]string
	for _, r := range []struct {
		label, key  string
		used, limit uint64
		bytes       bool
	}{
		{"your memory", "user_memory_max", l.Memory, l.MemoryMax, true},
		{"your tasks", "user_tasks_max", l.Tasks, l.TasksMax, false},
		{"your sandboxes", "max_sandboxes_per_user", l.Sandboxes, l.SandboxesMax, false},
		{"all memory", "slice_memory_max", l.AllMemory, l.AllMemoryMax, true},
		{"all tasks", "slice_tasks_max", l.AllTasks, l.AllTasksMax, false},
		{"all sandboxes", "max_sandboxes", l.AllSandboxes, l.AllSandboxesMax, false},
		{"memory promised", "max_memory", l.Promised, l.PromisedMax, true},
	} {
		f := func(v uint64) string {
			if r.bytes {
				return verb.BytesText(v)
			}
			return fmt.Sprint(v)
		}
		used, limit, share := "unknown", "none", "-"
		if r.used != sandboxd1.Unknown {
			used = f(r.used)
		}
		if r.limit > 0 {
			limit = f(r.limit)
			if r.used != sandboxd1.Unknown {
				share = fmt.Sprintf("%d%%", r.used*100/r.limit)
			}
		}
		rows = append(rows, []string{r.label, used, limit, share, "limits." + r.key})
	}
	return rows
}

// limitsJSON is GetLimits' answer by name; a bound of 0 is none, an
// amount not known is null.
func limitsJSON(l sandboxd1.Limits) map[string]any {
	v := func(n uint64) any {
		if n == sandboxd1.Unknown {
			return nil
		}
		return n
	}
	return map[string]any{
		"memory": v(l.Memory), "memory_max": l.MemoryMax,
		"tasks": v(l.Tasks), "tasks_max": l.TasksMax,
		"sandboxes": l.Sandboxes, "sandboxes_max": l.SandboxesMax,
		"all_memory": v(l.AllMemory), "all_memory_max": l.AllMemoryMax,
		"all_tasks": v(l.AllTasks), "all_tasks_max": l.AllTasksMax,
		"all_sandboxes": l.AllSandboxes, "all_sandboxes_max": l.AllSandboxesMax,
		"memory_promised": l.Promised, "memory_promised_max": l.PromisedMax,
	}
}

// yoursText is sandboxctl status's line of the caller's bounds, which all
// its sandboxes share: "memory 1.2 GiB of 5.9 GiB, tasks 40 of 8192,
// sandboxes 3 of 32 (sandboxctl limits)".
func yoursText(l sandboxd1.Limits) string {
	rows := limitsRows(l)
	var parts []string
	for i, what := range []string{"memory", "tasks", "sandboxes"} {
		text := what + " " + rows[i][1]
		if rows[i][2] != "none" {
			text += " of " + rows[i][2]
		}
		parts = append(parts, text)
	}
	return strings.Join(parts, ", ") + " (sandboxctl limits)"
}
