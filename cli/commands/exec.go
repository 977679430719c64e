package commands

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/godbus/dbus/v5"
	ucli "github.com/urfave/cli/v3"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/cli/verb"
	sbclient "github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/sandboxd1"
)

// ExecFlags are how a command is run (as root, its environment, directory,
// timeout, detached): exec's, shell's and run's, and try's for each
// variant and check.
func ExecFlags() []ucli.Flag {
	return []ucli.Flag{
		&ucli.BoolFlag{Name: "root", Usage: "run as root in the sandbox (root of its user namespace, nobody on the host; in a sandbox without one only root may); without it root's command has no capability"},
		&ucli.StringSliceFlag{Name: "env", Aliases: []string{"e"}, Usage: "KEY=value for the command's environment (repeat it)"},
		&ucli.StringFlag{Name: "workdir", Aliases: []string{"w"}, Usage: "working directory in the sandbox (default: the project's path; a relative one starts there)"},
		&ucli.DurationFlag{Name: "timeout", Usage: "end the command after this long, like 30s (exit status 124)", DefaultText: "none"},
		&ucli.BoolFlag{Name: "detach", Usage: "leave what the command started in the background (setsid) running after it ends"},
	}
}

// ExecOptions reads the exec flags (ExecFlags, and exec's --output-limit)
// into the Go client's options, whose WireOptions are what goes on the bus.
func ExecOptions(cmd *ucli.Command) (sbclient.ExecOptions, error) {
	opts := sbclient.ExecOptions{Root: cmd.Bool("root"), Detach: cmd.Bool("detach"), Dir: cmd.String("workdir")}
	for _, kv := range cmd.StringSlice("env") {
		if k, _, ok := cutEnv(kv); !ok || k == "" {
			return opts, verb.Usage("--env %s: want KEY=value", kv)
		}
	}
	opts.Env = cmd.StringSlice("env")
	if cmd.IsSet("timeout") {
		if opts.Timeout = cmd.Duration("timeout"); opts.Timeout <= 0 {
			return opts, verb.Usage("--timeout %v: want a duration above 0, like 30s", opts.Timeout)
		}
	}
	if cmd.Name == "exec" {
		if v := cmd.String("output-limit"); v != "" {
			if err := opts.OutputLimit.UnmarshalText([]byte(v)); err != nil || opts.OutputLimit == 0 {
				return opts, verb.Usage("--output-limit %s: want a size above 0, like 10M", v)
			}
		}
	}
	return opts, nil
}

func cutEnv(kv string) (string, string, bool) {
	for i := 0; i < len(kv); i++ {
		if kv[i] == '=' {
			return kv[:i], kv[i+1:], true
		}
	}
	return kv, "", false
}

// splitCommand takes SANDBOX [--] COMMAND... apart.
func splitCommand(cmd *ucli.Command, needCommand bool) (string, []string, error) {
	a := cmd.Args().Slice()
	if len(a) == 0 {
		return "", nil, verb.Usage("which sandbox? (usage: %s)", verb.UsageLine(cmd))
	}
	rest := a[1:]
	if i := slices.Index(rest, "--"); i > 0 && strings.HasPrefix(rest[0], "-") {
		// Options are read up to the sandbox's name only: one after it
		// would be taken for the command.
		return "", nil, verb.Usage("%s comes after the sandbox; options go before it (usage: %s)", rest[0], verb.UsageLine(cmd))
	}
	if len(rest) > 0 && rest[0] == "--" {
		rest = rest[1:]
	}
	if needCommand && len(rest) == 0 {
		return "", nil, verb.Usage("what command? (usage: %s)", verb.UsageLine(cmd))
	}
	return a[0], rest, nil
}

// Exec is `sandboxctl exec`.
func Exec() *ucli.Command {
	one := 1
	return &ucli.Command{
		Name:      "exec",
		Usage:     "run a command in a sandbox, as you, with your stdin, stdout and stderr",
		ArgsUsage: "SANDBOX -- COMMAND [ARG...]",
		Description: `Runs COMMAND in the sandbox as you. Its output streams to your pipe or
file as it is written (sandboxd hands your own stdin, stdout and stderr
to the command). Your terminal is never handed over: with a terminal on
stdin and stdout the command gets a terminal of the sandbox's own,
connected to yours (as shell does); any other of them that is a
terminal reaches the command through a pipe. When the command ends,
everything it started ends too, unless --detach. sandboxctl exits with
the command's status: 128+N if signal N ended it, 124 if --timeout did.
Ctrl-C (SIGINT), SIGTERM and SIGHUP are passed to the command; the
sandbox stays.`,
		StopOnNthArg: &one,
		Flags: append(ExecFlags(),
			&ucli.StringFlag{Name: "output-limit", Usage: "end the command once it wrote this much to stdout and stderr, like 10M"}),
		Action: func(ctx context.Context, cmd *ucli.Command) error {
			target, argv, err := splitCommand(cmd, true)
			if err != nil {
				return err
			}
			opts, err := ExecOptions(cmd)
			if err != nil {
				return err
			}
			// With --output-limit the sandbox's init counts the output:
			// pipes then stand in for the terminal.
			if isTerminalFD(0) && isTerminalFD(1) && opts.OutputLimit == 0 {
				return onTerminal(ctx, target, argv, opts)
			}
			return verb.WithClient(ctx, func(c *verb.Client) error {
				e, err := c.ResolveWatching(ctx, target)
				if err != nil {
					return err
				}
				// Caught before the call, so that a Ctrl-C in between is
				// not lost: it is passed on once the command runs.
				interrupts := make(chan os.Signal, 4)
				signal.Notify(interrupts, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
				defer signal.Stop(interrupts)
				stdio, err := newStdio()
				if err != nil {
					return err
				}
				defer stdio.close()
				var id string
				if err := verb.Call(ctx, c.Sandbox(e.ID), "running "+argv[0]+" in sandbox "+e.ID, sandboxd1.SandboxInterface+".Exec",
					append([]any{argv, opts.WireOptions()}, stdio.fds()...), &id); err != nil {
					return err
				}
				stdio.started()
				err = finish(ctx, c, e.ID, id, interrupts)
				stdio.drain()
				return err
			})
		},
	}
}

// finish waits for command id in sandbox to end, passing the user's
// signals on, and ends sandboxctl with its status.
func finish(ctx context.Context, c *verb.Client, sandbox, id string, interrupts <-chan os.Signal) error {
	st, err := c.WaitExit(ctx, id, interrupts, func(sig os.Signal) {
		if s, ok := sig.(syscall.Signal); ok {
			_ = verb.Call(ctx, c.Sandbox(sandbox), "signalling the command", sandboxd1.SandboxInterface+".Signal", []any{id, int32(s)})
		}
	})
	if err != nil {
		return err
	}
	switch st.How {
	case "exited":
		if st.Status == 0 {
			return nil
		}
		return verb.ExitWith(st.Status)
	case "signaled":
		return verb.ExitWith(st.Status)
	case "oom-killed":
		fmt.Fprintf(os.Stderr, "sandboxctl: the command was killed by sandbox %s's memory limit\n", sandbox)
		return verb.ExitWith(st.Status)
	case "timed-out":
		fmt.Fprintln(os.Stderr, "sandboxctl: the command timed out")
		return verb.ExitWith(124)
	case "output-limit":
		fmt.Fprintln(os.Stderr, "sandboxctl: the command was stopped at its output limit")
		return verb.ExitWith(st.Status)
	}
	return &verb.Error{Code: verb.ExitFailed, Msg: fmt.Sprintf("the command ended without a status (%s): sandbox %s ended under it", st.How, sandbox)}
}

// Shell is `sandboxctl shell`.
func Shell() *ucli.Command {
	one := 1
	return &ucli.Command{
		Name:      "shell",
		Usage:     "an interactive shell in a sandbox, on a terminal of its own",
		ArgsUsage: "SANDBOX [-- COMMAND [ARG...]]",
		Description: `Starts a login shell (bash where the host has it, else sh), or COMMAND,
on a new pseudo-terminal in the sandbox, and connects your terminal to
it. Ctrl-C and the window size reach it; exit the shell to come back.`,
		StopOnNthArg: &one,
		Flags:        ExecFlags(),
		Action: func(ctx context.Context, cmd *ucli.Command) error {
			target, argv, err := splitCommand(cmd, false)
			if err != nil {
				return err
			}
			if len(argv) == 0 {
				argv = []string{"/bin/sh", "-l"}
				if _, err := os.Stat("/bin/bash"); err == nil {
					argv = []string{"/bin/bash", "-l"}
				}
			}
			opts, err := ExecOptions(cmd)
			if err != nil {
				return err
			}
			if !isTerminalFD(0) {
				return verb.Usage("shell needs a terminal on stdin; use `sandboxctl exec` from scripts")
			}
			return onTerminal(ctx, target, argv, opts)
		},
	}
}

// onTerminal runs argv on a new terminal of the sandbox's (ExecTerminal)
// and connects the user's terminal, on stdin, to it: raw mode, bytes
// both ways, the window's size. The user's terminal itself never reaches
// the sandbox.
func onTerminal(ctx context.Context, target string, argv []string, opts sbclient.ExecOptions) error {
	saved, err := unix.IoctlGetTermios(0, unix.TCGETS)
	if err != nil {
		return verb.Usage("a terminal on stdin is needed here")
	}
	ws, err := unix.IoctlGetWinsize(0, unix.TIOCGWINSZ)
	if err != nil {
		ws = &unix.Winsize{Row: 24, Col: 80}
	}
	return verb.WithClient(ctx, func(c *verb.Client) error {
		e, err := c.ResolveWatching(ctx, target)
		if err != nil {
			return err
		}
		var id string
		var fd dbus.UnixFD
		if err := verb.Call(ctx, c.Sandbox(e.ID), "starting "+argv[0]+" on a terminal in sandbox "+e.ID, sandboxd1.SandboxInterface+".ExecTerminal",
			[]any{argv, opts.WireOptions(), ws.Row, ws.Col}, &id, &fd); err != nil {
			return err
		}
		master := os.NewFile(uintptr(fd), "terminal")
		defer master.Close()
		// Ctrl-C is a byte on the terminal in raw mode; a signal
		// sent to sandboxctl itself is passed on. Caught before
		// raw mode, so that none ends sandboxctl with the terminal
		// left raw.
		interrupts := make(chan os.Signal, 4)
		signal.Notify(interrupts, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
		defer signal.Stop(interrupts)
		raw := *saved
		makeRaw(&raw)
		if err := unix.IoctlSetTermios(0, unix.TCSETS, &raw); err != nil {
			return &verb.Error{Code: verb.ExitFailed, Msg: "setting the terminal to raw mode: " + err.Error()}
		}
		defer func() { _ = unix.IoctlSetTermios(0, unix.TCSETS, saved) }()
		go func() { _, _ = io.Copy(master, os.Stdin) }()
		drained := make(chan struct{})
		go func() { _, _ = io.Copy(os.Stdout, master); close(drained) }()
		winch := make(chan os.Signal, 1)
		signal.Notify(winch, syscall.SIGWINCH)
		defer signal.Stop(winch)
		go func() {
			for range winch {
				if ws, err := unix.IoctlGetWinsize(0, unix.TIOCGWINSZ); err == nil {
					_ = unix.IoctlSetWinsize(int(master.Fd()), unix.TIOCSWINSZ, ws)
				}
			}
		}()
		err = finish(ctx, c, e.ID, id, interrupts)
		select { // the terminal's last output
		case <-drained:
		case <-time.After(500 * time.Millisecond):
		}
		return err
	})
}

// isTerminalFD is isatty(3).
func isTerminalFD(fd int) bool {
	_, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	return err == nil
}

// stdio is what a command gets for sandboxctl's stdin, stdout and stderr:
// each as it is, but a terminal, for which a pipe stands in that
// sandboxctl copies through while the command runs. What the command
// leaves behind can then neither read the terminal later (keystrokes, a
// password typed for sudo) nor type into it (TIOCSTI).
type stdio struct {
	files  [3]*os.File
	theirs []*os.File // the pipes' ends the command gets; closed once passed
	stdinW *os.File   // the stdin pipe's end sandboxctl writes
	copies sync.WaitGroup
}

func newStdio() (*stdio, error) {
	s := &stdio{files: [3]*os.File{os.Stdin, os.Stdout, os.Stderr}}
	for fd := range 3 {
		if !isTerminalFD(fd) {
			continue
		}
		r, w, err := os.Pipe()
		if err != nil {
			s.close()
			return nil, &verb.Error{Code: verb.ExitFailed, Msg: "making a pipe for the terminal: " + err.Error()}
		}
		if fd == 0 {
			s.files[0], s.stdinW = r, w
			s.theirs = append(s.theirs, r)
			go func() { _, _ = io.Copy(w, os.Stdin); w.Close() }()
			continue
		}
		s.files[fd] = w
		s.theirs = append(s.theirs, w)
		own := os.Stdout
		if fd == 2 {
			own = os.Stderr
		}
		s.copies.Add(1)
		go func() { defer s.copies.Done(); _, _ = io.Copy(own, r); r.Close() }()
	}
	return s, nil
}

func (s *stdio) fds() []any {
	return []any{dbus.UnixFD(s.files[0].Fd()), dbus.UnixFD(s.files[1].Fd()), dbus.UnixFD(s.files[2].Fd())}
}

// started closes the ends the daemon has copies of: the output pipes
// then end when the command's processes do.
func (s *stdio) started() {
	for _, f := range s.theirs {
		f.Close()
	}
	s.theirs = nil
}

// drain waits (a little) for the command's last output; nothing more of
// the terminal's input goes in.
func (s *stdio) drain() {
	if s.stdinW != nil {
		s.stdinW.Close()
	}
	done := make(chan struct{})
	go func() { s.copies.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(500 * time.Millisecond): // a detached process holds it
	}
}

func (s *stdio) close() {
	s.started()
	if s.stdinW != nil {
		s.stdinW.Close()
	}
}

// makeRaw is cfmakeraw(3): input byte by byte, no echo, no signals from
// keys (the sandbox's terminal handles them), output untouched.
func makeRaw(t *unix.Termios) {
	t.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
	t.Oflag &^= unix.OPOST
	t.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
	t.Cflag &^= unix.CSIZE | unix.PARENB
	t.Cflag |= unix.CS8
	t.Cc[unix.VMIN] = 1
	t.Cc[unix.VTIME] = 0
}
