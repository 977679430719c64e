package commands

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	ucli "github.com/urfave/cli/v3"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/cli/verb"
	sbclient "github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/internal/termsafe"
	"github.com/sandboxd/sandboxd/sandboxd1"
)

// Background processes: run --detach (spawn), ps, logs, kill.

// Run is `sandboxctl run`.
func Run() *ucli.Command { return background("run") }

// Spawn is `sandboxctl spawn`: run --detach by another name.
func Spawn() *ucli.Command { return background("spawn") }

// background is run (which wants --detach) or spawn (which is detached).
func background(name string) *ucli.Command {
	one := 1
	var flags []ucli.Flag
	for _, f := range ExecFlags() {
		if f.Names()[0] != "detach" {
			flags = append(flags, f)
		}
	}
	argsUsage := "[--restart] SANDBOX -- COMMAND [ARG...]"
	if name == "run" {
		argsUsage = "--detach " + argsUsage
		flags = append(flags, &ucli.BoolFlag{Name: "detach", Aliases: []string{"d"}, Usage: "run it in the background and print its process id (needed)"})
	}
	flags = append(flags, &ucli.BoolFlag{Name: "restart", Usage: "declare it: start it again each time the sandbox starts (sandboxctl start, the host's reboot, a rollback) until kill ends it"})
	return &ucli.Command{
		Name:      name,
		Usage:     "start a command in a sandbox in the background; it runs on without you",
		ArgsUsage: argsUsage,
		Description: `Starts COMMAND in the sandbox in the background and prints its process
id. It runs on after sandboxctl exits, and through a restart of
sandboxd; its stdin is /dev/null, its output goes to a log the sandbox
keeps (sandboxctl logs; rotated at 8 MiB, the last two kept, counted in
the sandbox's disk quota). sandboxctl ps lists the processes, kill
signals one. When COMMAND ends, whatever it left running ends too.
With --restart it is declared: started again, as asked now, each time
the sandbox starts (sandboxctl start, the host's reboot, a rollback or
a rebase), until sandboxctl kill ends it (TERM, KILL, INT or QUIT
undeclare it; another signal does not). spawn is run --detach.`,
		StopOnNthArg: &one,
		Flags:        flags,
		Action: func(ctx context.Context, cmd *ucli.Command) error {
			if name == "run" && !cmd.Bool("detach") {
				return verb.Usage("run starts a command in the background: give --detach (to wait for a command, use sandboxctl exec)")
			}
			target, argv, err := splitCommand(cmd, true)
			if err != nil {
				return err
			}
			opts, err := ExecOptions(cmd)
			if err != nil {
				return err
			}
			return verb.WithClient(ctx, func(c *verb.Client) error {
				e, err := c.Resolve(ctx, target)
				if err != nil {
					return err
				}
				what := "starting " + argv[0] + " in the background"
				opts.Restart = cmd.Bool("restart")
				proc, err := c.Handle(e).Spawn(ctx, argv, opts)
				if err != nil {
					return verb.FromBus(what, err)
				}
				return verb.OutputOf(cmd).Line("%s", proc)
			})
		},
	}
}

// PS is `sandboxctl ps`.
func PS() *ucli.Command {
	return &ucli.Command{
		Name:      "ps",
		Usage:     "list a sandbox's background processes",
		ArgsUsage: "SANDBOX",
		Action: verb.OnSandbox(1, func(ctx context.Context, cmd *ucli.Command, c *verb.Client, e sandboxd1.ListEntry, _ []string) error {
			ps, err := c.Handle(e).Processes(ctx)
			if err != nil {
				return verb.FromBus("listing the background processes", err)
			}
			out := verb.OutputOf(cmd)
			if out.AsJSON {
				return out.JSON(ps)
			}
			if out.Quiet {
				for _, p := range ps {
					if err := out.Line("%s", p.ID); err != nil {
						return err
					}
				}
				return nil
			}
			rows := make([][]string, 0, len(ps))
			for _, p := range ps {
				rows = append(rows, []string{p.ID, strconv.FormatUint(uint64(p.PID), 10), processState(p),
					verb.Age(verb.FromMicros(p.Started)), termsafe.Line(strings.Join(p.Argv, " "))})
			}
			return out.Table([]string{"PROCESS", "PID", "STATE", "AGE", "COMMAND"}, rows)
		}),
	}
}

// processState reads like ps's: running, or how it ended.
func processState(p sandboxd1.ProcessEntry) string {
	switch {
	case p.Ended == 0:
		return "running"
	case p.How == "exited":
		return fmt.Sprintf("exited %d", p.Status)
	case p.How == "signaled":
		return fmt.Sprintf("killed by signal %d", p.Signal)
	}
	return p.How
}

// Logs is `sandboxctl logs`.
func Logs() *ucli.Command {
	return &ucli.Command{
		Name:      "logs",
		Usage:     "print a background process's output",
		ArgsUsage: "SANDBOX PROCESS",
		Description: `Prints what PROCESS wrote to stdout and stderr, from its start (or the
oldest kept, after a rotation); with -f, goes on printing as it writes,
until it ends. To a terminal, control characters are shown escaped.`,
		Flags: []ucli.Flag{
			&ucli.BoolFlag{Name: "follow", Aliases: []string{"f"}, Usage: "keep printing until the process ends"},
		},
		Action: verb.OnSandbox(2, func(ctx context.Context, cmd *ucli.Command, c *verb.Client, e sandboxd1.ListEntry, rest []string) error {
			w := cmd.Root().Writer
			escape := w == os.Stdout && isTerminalFD(1)
			var offset uint64
			for {
				data, next, ended, err := c.Handle(e).ReadLog(ctx, rest[0], offset, sbclient.MaxLogChunk)
				if err != nil {
					return verb.FromBus("reading the log of "+rest[0], err)
				}
				if escape {
					data = []byte(termsafe.Output(string(data)))
				}
				if _, err := w.Write(data); err != nil {
					return err
				}
				offset = next
				if ended || (!cmd.Bool("follow") && len(data) == 0) {
					return nil
				}
				if len(data) == 0 {
					select {
					case <-ctx.Done():
						return ctx.Err()
					case <-time.After(200 * time.Millisecond):
					}
				}
			}
		}),
	}
}

// Kill is `sandboxctl kill`.
func Kill() *ucli.Command {
	return &ucli.Command{
		Name:      "kill",
		Usage:     "signal a background process (and its process group); TERM by default",
		ArgsUsage: "SANDBOX PROCESS [SIGNAL]",
		Action: func(ctx context.Context, cmd *ucli.Command) error {
			a, err := verb.Args(cmd, 2, 3)
			if err != nil {
				return err
			}
			sig := syscall.SIGTERM
			if len(a) == 3 {
				if sig, err = parseSignal(a[2]); err != nil {
					return err
				}
			}
			return verb.WithClient(ctx, func(c *verb.Client) error {
				e, err := c.Resolve(ctx, a[0])
				if err != nil {
					return err
				}
				if err := c.Handle(e).SignalProcess(ctx, a[1], sig); err != nil {
					return verb.FromBus("signalling "+a[1], err)
				}
				return nil
			})
		},
	}
}

// parseSignal reads "9", "KILL" or "SIGKILL".
func parseSignal(s string) (syscall.Signal, error) {
	if n, err := strconv.Atoi(s); err == nil && n > 0 && n <= 64 {
		return syscall.Signal(n), nil
	}
	if n := unix.SignalNum("SIG" + strings.TrimPrefix(strings.ToUpper(s), "SIG")); n != 0 {
		return n, nil
	}
	return 0, verb.Usage("signal %q: give a number (1-64) or a name like TERM, KILL, INT, HUP", s)
}
