package cli

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/godbus/dbus/v5"
	ucli "github.com/urfave/cli/v3"

	"github.com/sandboxd/sandboxd/internal/termsafe"
	"github.com/sandboxd/sandboxd/sandboxd1"
)

func createCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "create",
		Usage:     "make a sandbox of a project",
		ArgsUsage: "PROJECT",
		Description: `Makes a sandbox: a copy-on-write snapshot of PROJECT (see
` + "`sandboxctl project list`" + `), ready when this returns. Its id is printed
(only the id with --quiet). Options left out take the profile's values,
then the host's defaults.`,
		Flags: []ucli.Flag{
			&ucli.StringFlag{Name: "name", Usage: "a name to call it by instead of its id"},
			&ucli.StringFlag{Name: "profile", Usage: "the profile of settings to start from (default, untrusted, trusted, or one of sandboxd.toml's)"},
			&ucli.StringFlag{Name: "memory", Usage: "memory limit, like 512M or 2G"},
			&ucli.StringFlag{Name: "cpu", Usage: "CPU limit in percent of one CPU, like 50% or 200%"},
			&ucli.UintFlag{Name: "tasks", Usage: "most processes and threads at once"},
			&ucli.StringFlag{Name: "disk", Usage: "most it may write, like 1G"},
			&ucli.DurationFlag{Name: "ttl", Usage: "time to live, like 2h: then it is destroyed"},
			&ucli.DurationFlag{Name: "runtime-max", Usage: "how long its processes may run, like 30m"},
			&ucli.StringFlag{Name: "network", Usage: "none (only loopback), allowlist (with --allow) or host"},
			&ucli.StringSliceFlag{Name: "allow", Usage: "with --network allowlist: HOST:PORT it may reach (repeat it); *.example.com:443 and 10.0.0.0/8:* work"},
			&ucli.BoolFlag{Name: "read-only-project", Usage: "it sees its project but cannot change it"},
		},
		Action: func(ctx context.Context, cmd *ucli.Command) error {
			a, err := args(cmd, 1, 1)
			if err != nil {
				return err
			}
			opts, err := createOptions(cmd)
			if err != nil {
				return err
			}
			return withClient(ctx, func(c *client) error {
				var id string
				var object dbus.ObjectPath
				if err := call(ctx, c.manager(), "creating a sandbox of "+a[0], sandboxd1.ManagerInterface+".CreateSandbox",
					[]any{a[0], opts}, &id, &object); err != nil {
					return err
				}
				out := outputOf(cmd)
				switch {
				case out.json:
					return out.JSON(map[string]any{"id": id, "name": cmd.String("name"), "project": a[0], "object": object})
				case out.quiet:
					return out.line("%s", id)
				case cmd.String("name") != "":
					return out.line("created sandbox %s (%s) of %s", id, cmd.String("name"), a[0])
				}
				return out.line("created sandbox %s of %s", id, a[0])
			})
		},
	}
}

// createOptions turns create's flags into CreateSandbox's options.
func createOptions(cmd *ucli.Command) (map[string]dbus.Variant, error) {
	opts := map[string]dbus.Variant{}
	for _, s := range []struct{ flag, option string }{{"name", "Name"}, {"profile", "Profile"}, {"network", "Network"}} {
		if v := cmd.String(s.flag); v != "" {
			opts[s.option] = dbus.MakeVariant(v)
		}
	}
	for _, s := range []struct{ flag, option string }{{"memory", "MemoryMax"}, {"disk", "DiskQuota"}} {
		if v := cmd.String(s.flag); v != "" {
			var size sandboxd1.Size
			if err := size.UnmarshalText([]byte(v)); err != nil {
				return nil, usage("--%s %s: %v", s.flag, v, err)
			}
			opts[s.option] = dbus.MakeVariant(uint64(size))
		}
	}
	if v := cmd.String("cpu"); v != "" {
		var q sandboxd1.CPUQuota
		if err := q.UnmarshalText([]byte(v)); err != nil {
			return nil, usage("--cpu %s: %v", v, err)
		}
		opts["CPUQuotaPerSecUSec"] = dbus.MakeVariant(q.PerSecUSec())
	}
	if cmd.IsSet("tasks") {
		opts["TasksMax"] = dbus.MakeVariant(uint64(cmd.Uint("tasks")))
	}
	for _, s := range []struct{ flag, option string }{{"ttl", "TTLUSec"}, {"runtime-max", "RuntimeMaxUSec"}} {
		if cmd.IsSet(s.flag) {
			d := cmd.Duration(s.flag)
			if d <= 0 {
				return nil, usage("--%s %v: want a duration above 0, like 2h", s.flag, d)
			}
			opts[s.option] = dbus.MakeVariant(uint64(d.Microseconds()))
		}
	}
	if allow := cmd.StringSlice("allow"); len(allow) > 0 {
		opts["Allow"] = dbus.MakeVariant(allow)
		if _, ok := opts["Network"]; !ok {
			opts["Network"] = dbus.MakeVariant("allowlist")
		}
	}
	if cmd.Bool("read-only-project") {
		opts["ReadOnlyProject"] = dbus.MakeVariant(true)
	}
	return opts, nil
}

// sandboxJSON is a sandbox in list's and status's JSON.
type sandboxJSON struct {
	ID      string    `json:"id"`
	Name    string    `json:"name,omitempty"`
	Project string    `json:"project"`
	State   string    `json:"state"`
	Owner   uint32    `json:"owner"`
	Created time.Time `json:"created"`
}

func listCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "list",
		Usage: "list the sandboxes you may see",
		Action: onSandboxes(func(ctx context.Context, cmd *ucli.Command, c *client, entries []sandboxd1.ListEntry) error {
			out := outputOf(cmd)
			js := []sandboxJSON{}
			for _, e := range entries {
				js = append(js, sandboxJSON{e.ID, e.Name, e.Project, e.State, e.Owner, fromMicros(e.Created)})
			}
			err := printList(out, js, func(e sandboxJSON) string { return e.ID },
				[]string{"ID", "NAME", "PROJECT", "STATE", "OWNER", "AGE"}, func(e sandboxJSON) []string {
					return []string{e.ID, dash(e.Name), e.Project, e.State, userName(e.Owner), age(e.Created)}
				})
			if err != nil || out.json || out.quiet {
				return err
			}
			return out.line("\n%d sandboxes", len(entries))
		}),
	}
}

func statusCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "status",
		Usage:     "show a sandbox: state, base, age, staleness, usage against its limits",
		ArgsUsage: "SANDBOX",
		Action: onSandbox(1, func(ctx context.Context, cmd *ucli.Command, c *client, e sandboxd1.ListEntry, _ []string) error {
			props, err := c.properties(ctx, e.ID)
			if err != nil {
				return err
			}
			stale, _ := props["Staleness"].Value().(string)
			detail := staleness(stale)
			if stale == "stale" {
				// How far: the paths the project changed since the base.
				if paths, base, err := c.projectChanges(ctx, e.ID); err == nil {
					detail = stalenessDetail(paths, base)
				}
			}
			return printStatus(outputOf(cmd), props, detail)
		}),
	}
}

func printStatus(out output, props map[string]dbus.Variant, stalenessText string) error {
	str := func(k string) string { s, _ := props[k].Value().(string); return s }
	u64 := func(k string) uint64 { v, _ := props[k].Value().(uint64); return v }
	owner, _ := props[sandboxd1.PropOwner].Value().(uint32) // "u", not "t"
	limits, _ := props["Limits"].Value().(map[string]dbus.Variant)
	usage, _ := props["Usage"].Value().(map[string]dbus.Variant)
	if out.json {
		plain := map[string]any{}
		for k, v := range props {
			plain[k] = v.Value()
		}
		for k, m := range map[string]map[string]dbus.Variant{"Limits": limits, "Usage": usage} {
			flat := map[string]any{}
			for n, v := range m {
				flat[n] = v.Value()
			}
			plain[k] = flat
		}
		return out.JSON(plain)
	}
	if out.quiet {
		return out.line("%s", str("State"))
	}
	created := fromMicros(u64("Created"))
	rows := [][]string{
		{"Sandbox", str("Id") + nameSuffix(str("Name"))},
		{"Project", str("Project")},
		{"State", stateText(str("State"), props[sandboxd1.PropFrozenIdle])},
		{"Owner", userName(owner)},
		{"Created", fmt.Sprintf("%s (%s ago)", created.Local().Format(time.DateTime), age(created))},
		{"Expires", expires(u64("Expires"))},
		{"Base", str("Base")},
		{"Staleness", stalenessText},
		{"Network", network(str("Network"), props["Allow"])},
		{"Files", str("Path")},
		{"Unit", str("Unit")},
	}
	rows = append(rows, []string{"IDs", hostIDsText(props[sandboxd1.PropHostIDs])})
	if ro, _ := props["ReadOnlyProject"].Value().(bool); ro {
		rows = append(rows, []string{"Project", "read-only"})
	}
	amount := func(m map[string]dbus.Variant, k string) (uint64, bool) {
		v, ok := m[k].Value().(uint64)
		return v, ok
	}
	// Each a line: "USED of LIMIT (N%)" or "USED, no limit", then the
	// peak, where there is one: "12.0 MiB of 256.0 MiB (4%), peak 60.0
	// MiB (23%)".
	for _, r := range []struct {
		label, used, limit, peak string
		bytes                    bool
	}{
		{"Memory", "MemoryCurrent", "MemoryMax", "MemoryPeak", true},
		{"Tasks", "TasksCurrent", "TasksMax", "", false},
		{"Disk", "DiskUsed", "DiskQuota", "", true},
	} {
		u, uok := amount(usage, r.used)
		l, lok := amount(limits, r.limit)
		f := func(v uint64) string {
			if r.bytes {
				return bytesText(v)
			}
			return fmt.Sprint(v)
		}
		text := "not accounted here"
		if uok {
			text = f(u)
		}
		if lok {
			text += " of " + f(l)
			if uok && l > 0 {
				text += fmt.Sprintf(" (%d%%)", u*100/l)
			}
		} else {
			text += ", no limit"
		}
		if p, ok := amount(usage, r.peak); r.peak != "" && ok {
			text += ", peak " + f(p)
			if lok && l > 0 {
				text += fmt.Sprintf(" (%d%%)", p*100/l)
			}
		}
		rows = append(rows, []string{r.label, text})
	}
	if cpu, ok := amount(usage, "CPUUsageNSec"); ok {
		text := time.Duration(cpu).Round(time.Millisecond).String() + " used"
		if q, ok := amount(limits, "CPUQuotaPerSecUSec"); ok {
			text += fmt.Sprintf(", limit %d%% of a CPU", q/10000)
		}
		rows = append(rows, []string{"CPU", text})
	}
	for _, r := range rows {
		// Staleness names paths the project changed (a promotion of a
		// sandbox's): nothing in a value may act on the terminal.
		if err := out.line("%-10s %s", r[0]+":", termsafe.Text(r[1])); err != nil {
			return err
		}
	}
	return nil
}

func nameSuffix(name string) string {
	if name == "" {
		return ""
	}
	return " (" + name + ")"
}

func expires(us uint64) string {
	if us == 0 {
		return "never"
	}
	t := fromMicros(us)
	return fmt.Sprintf("%s (in %s)", t.Local().Format(time.DateTime), time.Until(t).Round(time.Second))
}

func staleness(s string) string {
	switch s {
	case "current":
		return "current (the project has not changed since the base was taken)"
	case "stale":
		return "stale (the project changed since the base was taken)"
	}
	return s + " (this pool cannot tell without reading files)"
}

func network(mode string, allow dbus.Variant) string {
	if list, _ := allow.Value().([]string); mode == "allowlist" && len(list) > 0 {
		return "allowlist: " + strings.Join(list, ", ")
	}
	return mode
}

func stateCommand(name, usageText, method, done string) *ucli.Command {
	return &ucli.Command{
		Name:      name,
		Usage:     usageText,
		ArgsUsage: "SANDBOX...",
		Action: func(ctx context.Context, cmd *ucli.Command) error {
			a, err := args(cmd, 1, -1)
			if err != nil {
				return err
			}
			return withClient(ctx, func(c *client) error {
				out := outputOf(cmd)
				var ids []string
				for _, arg := range a {
					e, err := c.resolve(ctx, arg)
					if err != nil {
						return err
					}
					if err := call(ctx, c.sandbox(e.ID), name+" of sandbox "+e.ID, method, nil); err != nil {
						return err
					}
					ids = append(ids, e.ID)
					if !out.json && !out.quiet {
						if err := out.line("%s sandbox %s", done, e.ID); err != nil {
							return err
						}
					}
				}
				if out.json {
					return out.JSON(map[string]any{done: ids})
				}
				return nil
			})
		},
	}
}

func freezeCommand() *ucli.Command {
	return stateCommand("freeze", "stop every process of sandboxes until thaw", sandboxd1.SandboxInterface+".Freeze", "froze")
}

func thawCommand() *ucli.Command {
	return stateCommand("thaw", "let frozen sandboxes run again", sandboxd1.SandboxInterface+".Thaw", "thawed")
}

func destroyCommand() *ucli.Command {
	return stateCommand("destroy", "stop sandboxes' processes and delete their files", sandboxd1.SandboxInterface+".Destroy", "destroyed")
}

func gcCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "gc",
		Usage: "destroy your sandboxes that are past their time to live, stuck, or older than --older-than",
		Description: `Destroys the sandboxes you may see that are past their time to live
(the daemon destroys those within seconds too), stuck in a state no call
gets them out of (creating or destroying for over a minute), or, with
--older-than, made longer ago than that. --dry-run lists them only.`,
		Flags: []ucli.Flag{
			&ucli.DurationFlag{Name: "older-than", Usage: "also destroy sandboxes made longer ago than this, like 24h"},
			&ucli.BoolFlag{Name: "dry-run", Usage: "say what would be destroyed, destroy nothing"},
		},
		Action: onSandboxes(func(ctx context.Context, cmd *ucli.Command, c *client, entries []sandboxd1.ListEntry) error {
			out := outputOf(cmd)
			now := time.Now()
			var gone []string
			for _, e := range entries {
				why := gcReason(ctx, c, e, now, cmd.Duration("older-than"))
				if why == "" {
					continue
				}
				if !cmd.Bool("dry-run") {
					if err := call(ctx, c.sandbox(e.ID), "destroying sandbox "+e.ID, sandboxd1.SandboxInterface+".Destroy", nil); err != nil {
						return err
					}
				}
				gone = append(gone, e.ID)
				if !out.json && !out.quiet {
					verb := "destroyed"
					if cmd.Bool("dry-run") {
						verb = "would destroy"
					}
					if err := out.line("%s sandbox %s: %s", verb, e.ID, why); err != nil {
						return err
					}
				}
			}
			if out.json {
				return out.JSON(map[string]any{"destroyed": slices.Clip(append([]string{}, gone...)), "dry_run": cmd.Bool("dry-run")})
			}
			if len(gone) == 0 && !out.quiet {
				return out.line("nothing to collect")
			}
			return nil
		}),
	}
}

// gcReason says why gc takes sandbox e, or "".
func gcReason(ctx context.Context, c *client, e sandboxd1.ListEntry, now time.Time, olderThan time.Duration) string {
	created := fromMicros(e.Created)
	if (e.State == "creating" || e.State == "destroying") && now.Sub(created) > time.Minute {
		return "stuck " + e.State
	}
	if v, err := c.property(ctx, e.ID, "Expires"); err == nil {
		if exp, _ := v.Value().(uint64); exp != 0 && fromMicros(exp).Before(now) {
			return "past its time to live"
		}
	}
	if olderThan > 0 && now.Sub(created) > olderThan {
		return "made " + age(created) + " ago"
	}
	return ""
}

// hostIDsText says who root is in the sandbox: its own, a block of host
// ids, or the host's.
func hostIDsText(v dbus.Variant) string {
	ids, _ := v.Value().([]uint32)
	if len(ids) != 2 {
		return "the host's (no user namespace: root inside is the host's root)"
	}
	return fmt.Sprintf("%d-%d on the host (user namespace: root inside is uid %d outside)", ids[0], ids[1], ids[0])
}

// stateText is the state, and why a frozen sandbox is.
func stateText(state string, idle dbus.Variant) string {
	if b, _ := idle.Value().(bool); b && state == "frozen" {
		return "frozen (idle: the next command or connection to one of its ports thaws it)"
	}
	return state
}
