// Command sandboxd is the sandboxing daemon: it owns the sandboxes of this
// host and serves the org.sandboxd1 D-Bus API on the system bus.
//
//	sandboxd [--config FILE]   run the daemon (systemd starts it: Type=notify)
//	sandboxd --version
//
// `sandboxd sandbox-init` is not for people: it is a sandbox's init (see
// runtime/nsinit), which the daemon starts.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/sandboxd/sandboxd/runtime/nsinit"
)

// runtimeDir holds the live sandboxes' control sockets (systemd's
// RuntimeDirectory=sandboxd, kept across restarts of the daemon).
const runtimeDir = "/run/sandboxd"

// version is set at build time from `git describe` (see the Makefile).
var version = "dev"

func main() {
	if nsinit.IsInit() {
		nsinit.Main() // `sandboxd sandbox-init`, started by the daemon
	}
	fs := flag.NewFlagSet("sandboxd", flag.ContinueOnError)
	configPath := fs.String("config", "", "configuration file (default /etc/sandboxd/sandboxd.toml, optional there)")
	showVersion := fs.Bool("version", false, "print the version and exit")
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	if *showVersion {
		fmt.Println("sandboxd", version)
		return
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "sandboxd: unexpected argument %q (usage: sandboxd [--config FILE] | --version)\n", fs.Arg(0))
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := run(ctx, *configPath); err != nil {
		slog.Error("sandboxd stopped", "error", err)
		fmt.Fprintf(os.Stderr, "sandboxd: %v\n", err)
		var exit exitCode
		if errors.As(err, &exit) {
			os.Exit(int(exit))
		}
		os.Exit(1)
	}
}

// exitCode is an error that asks for a specific exit status (systemd's
// RestartPreventExitStatus can then tell a bad configuration from a crash).
type exitCode int

func (e exitCode) Error() string { return fmt.Sprintf("exit status %d", int(e)) }
