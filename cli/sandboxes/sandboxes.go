package sandboxes

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/godbus/dbus/v5"
	ucli "github.com/urfave/cli/v3"

	"github.com/sandboxd/sandboxd/cli/verb"
	sbclient "github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/internal/termsafe"
	"github.com/sandboxd/sandboxd/sandboxd1"
)

// Create is `sandboxctl create`.
func Create() *ucli.Command {
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
			&ucli.StringFlag{Name: "memory", Usage: "memory limit, like 512M or 2G",
				DefaultText: "the profile's, else the daemon's: a quarter of the host's memory, at most 4G, unless configured"},
			&ucli.StringFlag{Name: "cpu", Usage: "CPU limit in percent of one CPU, like 50% or 200%"},
			&ucli.UintFlag{Name: "tasks", Usage: "most processes and threads at once",
				DefaultText: fmt.Sprintf("the profile's, else the daemon's: %d unless configured", sandboxd1.DefaultTasksMax)},
			&ucli.StringFlag{Name: "disk", Usage: "most it may write, like 1G",
				DefaultText: "the profile's, else the daemon's: a tenth of its pool's size, unless configured"},
			&ucli.DurationFlag{Name: "ttl", Usage: "time to live, like 2h: then it is destroyed",
				DefaultText: "the profile's, else the daemon's: " + verb.DurationText(sandboxd1.DefaultTTL) + " unless configured"},
			&ucli.DurationFlag{Name: "runtime-max", Usage: "how long its processes may run, like 30m", DefaultText: "the profile's (untrusted: 1h), else no bound"},
			&ucli.StringFlag{Name: "network", Usage: "none (only loopback), allowlist (with --allow) or host", DefaultText: "the profile's, else none"},
			&ucli.StringSliceFlag{Name: "allow", Usage: "with --network allowlist: HOST:PORT it may reach (repeat it); *.example.com:443 and 10.0.0.0/8:* work"},
			&ucli.BoolFlag{Name: "read-only-project", Usage: "it sees its project but cannot change it"},
			&ucli.BoolFlag{Name: "boot", Usage: "run a systemd of its own: `sandboxctl exec S -- systemctl start nginx` starts the host's service on the sandbox's copies of its files"},
		},
		Action: func(ctx context.Context, cmd *ucli.Command) error {
			a, err := verb.Args(cmd, 1, 1)
			if err != nil {
				return err
			}
			opts, err := CreateOptions(cmd)
			if err != nil {
				return err
			}
			return verb.WithClient(ctx, func(c *verb.Client) error {
				sb, err := c.API.Create(ctx, a[0], opts)
				if err != nil {
					return verb.FromBus("creating a sandbox of "+a[0], err)
				}
				id := sb.ID()
				out := verb.OutputOf(cmd)
				switch {
				case out.AsJSON:
					return out.JSON(map[string]any{"id": id, "name": cmd.String("name"), "project": a[0], "object": sandboxd1.SandboxPath(id)})
				case out.Quiet:
					return out.Line("%s", id)
				case cmd.String("name") != "":
					return out.Line("created sandbox %s (%s) of %s", id, cmd.String("name"), a[0])
				}
				return out.Line("created sandbox %s of %s", id, a[0])
			})
		},
	}
}

// CreateOptions turns create's flags into the Go client's options,
// which make CreateSandbox's. A limit of 0 is refused here: to the Go
// client it is "not set", which is not what whoever typed it meant.
func CreateOptions(cmd *ucli.Command) (sbclient.CreateOptions, error) {
	opts := sbclient.CreateOptions{Name: cmd.String("name"), Profile: cmd.String("profile"), Network: cmd.String("network"),
		Allow: cmd.StringSlice("allow"), ReadOnlyProject: cmd.Bool("read-only-project"), Boot: cmd.Bool("boot")}
	for _, s := range []struct {
		flag string
		to   *sandboxd1.Size
	}{{"memory", &opts.MemoryMax}, {"disk", &opts.DiskQuota}} {
		if v := cmd.String(s.flag); v != "" {
			if err := s.to.UnmarshalText([]byte(v)); err != nil {
				return opts, verb.Usage("--%s %s: %v", s.flag, v, err)
			}
			if *s.to == 0 {
				return opts, verb.Usage("--%s %s: want a size above 0, like 512M (leave it out for the profile's)", s.flag, v)
			}
		}
	}
	if v := cmd.String("cpu"); v != "" {
		if err := opts.CPUQuota.UnmarshalText([]byte(v)); err != nil {
			return opts, verb.Usage("--cpu %s: %v", v, err)
		}
	}
	if cmd.IsSet("tasks") {
		if opts.TasksMax = uint64(cmd.Uint("tasks")); opts.TasksMax == 0 {
			return opts, verb.Usage("--tasks 0: want 1 or more (leave it out for the profile's)")
		}
	}
	for _, s := range []struct {
		flag string
		to   *time.Duration
	}{{"ttl", &opts.TTL}, {"runtime-max", &opts.RuntimeMax}} {
		if cmd.IsSet(s.flag) {
			if *s.to = cmd.Duration(s.flag); *s.to <= 0 {
				return opts, verb.Usage("--%s %v: want a duration above 0, like 2h", s.flag, *s.to)
			}
		}
	}
	if len(opts.Allow) > 0 && opts.Network == "" {
		opts.Network = sbclient.NetworkAllowlist
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

// List is `sandboxctl list`.
func List() *ucli.Command {
	return &ucli.Command{
		Name:  "list",
		Usage: "list the sandboxes you may see",
		Action: verb.OnSandboxes(func(ctx context.Context, cmd *ucli.Command, c *verb.Client, entries []sandboxd1.ListEntry) error {
			out := verb.OutputOf(cmd)
			js := []sandboxJSON{}
			for _, e := range entries {
				js = append(js, sandboxJSON{e.ID, e.Name, e.Project, e.State, e.Owner, verb.JSONTime(verb.FromMicros(e.Created))})
			}
			err := verb.PrintList(out, js, func(e sandboxJSON) string { return e.ID },
				[]string{"ID", "NAME", "PROJECT", "STATE", "OWNER", "AGE"}, func(e sandboxJSON) []string {
					return []string{e.ID, dash(e.Name), e.Project, e.State, verb.UserName(e.Owner), verb.Age(e.Created)}
				})
			if err != nil || out.AsJSON || out.Quiet {
				return err
			}
			return out.Line("\n%s", verb.Plural(len(entries), "sandbox"))
		}),
	}
}

// Status is `sandboxctl status`.
func Status() *ucli.Command {
	return &ucli.Command{
		Name:      "status",
		Usage:     "show a sandbox: state, base, age, staleness, usage against its limits",
		ArgsUsage: "SANDBOX",
		Action: verb.OnSandbox(1, func(ctx context.Context, cmd *ucli.Command, c *verb.Client, e sandboxd1.ListEntry, _ []string) error {
			sb, out := c.Handle(e), verb.OutputOf(cmd)
			if out.AsJSON {
				// Every property by its D-Bus name, as the bus gives it.
				props, err := sb.Properties(ctx)
				if err != nil {
					return verb.FromBus("reading sandbox "+e.ID, err)
				}
				return out.JSON(plainProperties(props))
			}
			st, err := sb.Status(ctx)
			if err != nil {
				return verb.FromBus("reading sandbox "+e.ID, err)
			}
			detail := staleness(st.Staleness)
			if st.Staleness == "stale" {
				// How far: the paths the project changed since the base.
				if paths, base, err := sb.ProjectChanges(ctx); err == nil {
					detail = stalenessDetail(paths, base)
				}
			}
			var system []string
			if st.Boot {
				system = systemText(sb.System(ctx))
			}
			if err := printStatus(out, st, detail, system...); err != nil || out.Quiet || st.Owner != uint32(os.Getuid()) {
				return err
			}
			// The caller's own bounds, which this sandbox shares with its
			// others: a read of its own, so a failure is left out.
			if l, err := c.API.Bounds(ctx); err == nil {
				return out.Line("%-10s %s", "Yours:", yoursText(l))
			}
			return nil
		}),
	}
}

// plainProperties are a sandbox's properties as plain values for JSON,
// Limits' and Usage's too.
func plainProperties(props map[string]dbus.Variant) map[string]any {
	plain := map[string]any{}
	for k, v := range props {
		plain[k] = v.Value()
		if us, ok := v.Value().(uint64); ok && (k == sandboxd1.PropCreated || k == sandboxd1.PropExpires) {
			plain[k] = verb.JSONMicros(us) // RFC 3339, as every --json's times; Expires 0, none, is null
			continue
		}
		if m, ok := v.Value().(map[string]dbus.Variant); ok {
			flat := map[string]any{}
			for n, v := range m {
				flat[n] = v.Value()
			}
			plain[k] = flat
		}
	}
	return plain
}

func printStatus(out verb.Output, st sbclient.Status, stalenessText string, system ...string) error {
	if out.Quiet {
		return out.Line("%s", st.State)
	}
	rows := [][]string{
		{"Sandbox", st.ID + nameSuffix(st.Name)},
		{"Project", st.Project},
		{"State", stateText(st.State, st.FrozenIdle)},
		{"Owner", verb.UserName(st.Owner)},
		{"Created", fmt.Sprintf("%s (%s ago)", st.Created.Local().Format(time.DateTime), verb.Age(st.Created))},
		{"Expires", expires(st.Expires)},
		{"Base", st.Base},
		{"Staleness", stalenessText},
		{"Network", network(st.Network, st.Allow)},
		{"Files", st.Path},
		{"Unit", st.Unit},
		{"IDs", hostIDsText(st.HostIDs)},
	}
	if st.ReadOnlyProject {
		rows = append(rows, []string{"Project", "read-only"})
	}
	if len(system) == 1 {
		rows = append(rows, []string{"System", system[0]})
	}
	u, l := st.Usage, st.Limits
	// Each a line: "USED of LIMIT (N%)" or "USED, no limit", then the
	// peak, where there is one: "12.0 MiB of 256.0 MiB (4%), peak 60.0
	// MiB (23%)". A limit of 0 is one not set.
	for _, r := range []struct {
		label      string
		used, peak *uint64
		limit      uint64
		bytes      bool
	}{
		{"Memory", u.MemoryCurrent, u.MemoryPeak, uint64(l.MemoryMax), true},
		{"Tasks", u.TasksCurrent, nil, l.TasksMax, false},
		{"Disk", u.DiskUsed, nil, uint64(l.DiskQuota), true},
	} {
		f := func(v uint64) string {
			if r.bytes {
				return verb.BytesText(v)
			}
			return fmt.Sprint(v)
		}
		text := "not accounted here"
		if r.used != nil {
			text = f(*r.used)
		}
		if r.limit > 0 {
			text += " of " + f(r.limit)
			if r.used != nil {
				text += fmt.Sprintf(" (%d%%)", *r.used*100/r.limit)
			}
		} else {
			text += ", no limit"
		}
		if r.peak != nil {
			text += ", peak " + f(*r.peak)
			if r.limit > 0 {
				text += fmt.Sprintf(" (%d%%)", *r.peak*100/r.limit)
			}
		}
		rows = append(rows, []string{r.label, text})
	}
	if u.CPU != nil {
		text := u.CPU.Round(time.Millisecond).String() + " used"
		if l.CPUQuota > 0 {
			text += fmt.Sprintf(", limit %d%% of a CPU", l.CPUQuota)
		}
		rows = append(rows, []string{"CPU", text})
	}
	for _, r := range rows {
		// Staleness names paths the project changed (a promotion of a
		// sandbox's): nothing in a value may act on the terminal.
		if err := out.Line("%-10s %s", r[0]+":", termsafe.Text(r[1])); err != nil {
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

func expires(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
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

func network(mode string, allow []string) string {
	if mode == sbclient.NetworkAllowlist && len(allow) > 0 {
		return "allowlist: " + strings.Join(allow, ", ")
	}
	return mode
}

func stateCommand(name, usageText string, do func(*sbclient.Sandbox, context.Context) error, done string) *ucli.Command {
	return stateCall(name, usageText, func(ctx context.Context, c *verb.Client, e sandboxd1.ListEntry) error {
		if err := do(c.Handle(e), ctx); err != nil {
			return verb.FromBus(name+" of sandbox "+e.ID, err)
		}
		return nil
	}, done)
}

// stateCall is stateCommand for a call made by do.
func stateCall(name, usageText string, do func(context.Context, *verb.Client, sandboxd1.ListEntry) error, done string) *ucli.Command {
	return &ucli.Command{
		Name:      name,
		Usage:     usageText,
		ArgsUsage: "SANDBOX...",
		Action: func(ctx context.Context, cmd *ucli.Command) error {
			a, err := verb.Args(cmd, 1, -1)
			if err != nil {
				return err
			}
			return verb.WithClient(ctx, func(c *verb.Client) error {
				out := verb.OutputOf(cmd)
				var ids []string
				for _, arg := range a {
					e, err := c.Resolve(ctx, arg)
					if err != nil {
						return err
					}
					if err := do(ctx, c, e); err != nil {
						return err
					}
					ids = append(ids, e.ID)
					if !out.AsJSON && !out.Quiet {
						if err := out.Line("%s sandbox %s", done, e.ID); err != nil {
							return err
						}
					}
				}
				if out.AsJSON {
					return out.JSON(map[string]any{done: ids})
				}
				return nil
			})
		},
	}
}

// Freeze is `sandboxctl freeze`.
func Freeze() *ucli.Command {
	return stateCommand("freeze", "stop every process of sandboxes until thaw", (*sbclient.Sandbox).Freeze, "froze")
}

// Stop is `sandboxctl stop`, Start `sandboxctl start`.
func Stop() *ucli.Command {
	return stateCall("stop", "end sandboxes' processes and keep them (files, checkpoints, ports, declared processes) until start",
		sandboxMethod("stop", sandboxd1.MethodStop), "stopped")
}

func Start() *ucli.Command {
	return stateCall("start", "run stopped sandboxes again (a booted one boots; declared processes start)",
		sandboxMethod("start", sandboxd1.MethodStart), "started")
}

// sandboxMethod calls method, with no arguments, on the sandbox.
func sandboxMethod(name, method string) func(context.Context, *verb.Client, sandboxd1.ListEntry) error {
	return func(ctx context.Context, c *verb.Client, e sandboxd1.ListEntry) error {
		return verb.Call(ctx, c.Sandbox(e.ID), name+" of sandbox "+e.ID, sandboxd1.SandboxInterface+"."+method, nil)
	}
}

// Thaw is `sandboxctl thaw`.
func Thaw() *ucli.Command {
	return stateCommand("thaw", "let frozen sandboxes run again", (*sbclient.Sandbox).Thaw, "thawed")
}

// Destroy is `sandboxctl destroy`.
func Destroy() *ucli.Command {
	return stateCommand("destroy", "stop sandboxes' processes and delete their files", (*sbclient.Sandbox).Destroy, "destroyed")
}

// GC is `sandboxctl gc`.
func GC() *ucli.Command {
	return &ucli.Command{
		Name:  "gc",
		Usage: "destroy your sandboxes that are past their time to live, stuck, or older than --older-than",
		Description: `Destroys the sandboxes you may see that are past their time to live
(the daemon destroys those within seconds too), stuck in a state no call
gets them out of (creating or destroying for over a minute), or, with
--older-than, made longer ago than that. --dry-run lists them only.`,
		Flags: []ucli.Flag{
			&ucli.DurationFlag{Name: "older-than", Usage: "also destroy sandboxes made longer ago than this, like 24h", DefaultText: "none: only the expired and the stuck"},
			&ucli.BoolFlag{Name: "dry-run", Usage: "say what would be destroyed, destroy nothing"},
		},
		Action: verb.OnSandboxes(func(ctx context.Context, cmd *ucli.Command, c *verb.Client, entries []sandboxd1.ListEntry) error {
			out := verb.OutputOf(cmd)
			now := time.Now()
			var gone []string
			for _, e := range entries {
				why := gcReason(ctx, c, e, now, cmd.Duration("older-than"))
				if why == "" {
					continue
				}
				if !cmd.Bool("dry-run") {
					if err := c.Handle(e).Destroy(ctx); err != nil {
						return verb.FromBus("destroying sandbox "+e.ID, err)
					}
				}
				gone = append(gone, e.ID)
				if !out.AsJSON && !out.Quiet {
					verb := "destroyed"
					if cmd.Bool("dry-run") {
						verb = "would destroy"
					}
					if err := out.Line("%s sandbox %s: %s", verb, e.ID, why); err != nil {
						return err
					}
				}
			}
			if out.AsJSON {
				return out.JSON(map[string]any{"destroyed": slices.Clip(append([]string{}, gone...)), "dry_run": cmd.Bool("dry-run")})
			}
			if len(gone) == 0 && !out.Quiet {
				return out.Line("nothing to collect")
			}
			return nil
		}),
	}
}

// gcReason says why gc takes sandbox e, or "".
func gcReason(ctx context.Context, c *verb.Client, e sandboxd1.ListEntry, now time.Time, olderThan time.Duration) string {
	created := verb.FromMicros(e.Created)
	if (e.State == "creating" || e.State == "destroying") && now.Sub(created) > time.Minute {
		return "stuck " + e.State
	}
	if exp, err := c.Handle(e).Expires(ctx); err == nil && !exp.IsZero() && exp.Before(now) {
		return "past its time to live"
	}
	if olderThan > 0 && now.Sub(created) > olderThan {
		return "made " + verb.Age(created) + " ago"
	}
	return ""
}

// hostIDsText says who root is in the sandbox: its own, a block of host
// ids, or the host's.
func hostIDsText(ids []uint32) string {
	if len(ids) != 2 {
		return "the host's (no user namespace: root inside is the host's root)"
	}
	return fmt.Sprintf("%d-%d on the host (user namespace: root inside is uid %d outside)", ids[0], ids[1], ids[0])
}

// stateText is the state, and why a frozen sandbox is.
func stateText(state string, idle bool) string {
	if idle && state == sandboxd1.StateFrozen {
		return "frozen (idle: the next command or connection to one of its ports thaws it)"
	}
	if state == sandboxd1.StateStopped {
		return "stopped (its processes ended, its files kept: sandboxctl start runs it again)"
	}
	return state
}

// systemText is a booted sandbox's System as status shows it: "running
// (no failed units)", "degraded (failed: a.service, b.socket)", or why it
// could not be read.
func systemText(state string, failed []string, err error) []string {
	if err != nil {
		return []string{"unknown: " + err.Error()}
	}
	if len(failed) == 0 {
		return []string{state + " (no failed units)"}
	}
	return []string{state + " (failed: " + strings.Join(failed, ", ") + ")"}
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// stalenessDetail says how far the project moved, for status: how many
// paths, the first few, since when.
func stalenessDetail(paths []string, base time.Time) string {
	if len(paths) == 0 {
		return "current (the project has not changed since the base was taken)"
	}
	shown := paths
	if len(shown) > 5 {
		shown = shown[:5]
	}
	more := ""
	if len(paths) > len(shown) {
		more = fmt.Sprintf(", and %d more", len(paths)-len(shown))
	}
	return fmt.Sprintf("stale: the project changed %s since the base was taken %s ago (%s%s); `sandboxctl rebase` brings the sandbox onto it",
		verb.Plural(len(paths), "path"), verb.Age(base), strings.Join(shown, ", "), more)
}
