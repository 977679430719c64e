// Command testbed brings the sandboxd test environment up and down by hand:
// a private systemd with a system bus, a loop btrfs and a zfs-fuse pool (see
// package testbed). Tests do not need it: their TestMain starts their own.
// TESTBED_DIR names another directory for its files (one testbed still runs
// at a time on a machine).
//
//	testbed run -- CMD ARGS    start one, run a command inside, end it
//	testbed up                 start one and leave it running
//	testbed status             say what runs, and check each part
//	testbed exec -- CMD ARGS   run a command inside it
//	testbed reboot             power cut and boot, its pools kept (Testbed.Reboot)
//	testbed down               end it (also clears what a crashed one left)
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/sandboxd/sandboxd/tests/testbed"
)

const usage = `usage: testbed run -- CMD [ARGS...] | up | status | exec -- CMD [ARGS...] | reboot | down`

func main() {
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer cancel()
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "up":
		err = up(ctx)
	case "status":
		err = status(ctx)
	case "run":
		cwd, err := os.Getwd()
		if err != nil {
			fmt.Fprintf(os.Stderr, "testbed: %v\n", err)
			os.Exit(2)
		}
		os.Exit(testbed.Run([]string{cwd}, cwd, commandArgs()))
	case "exec":
		err = execInside(ctx, commandArgs())
	case "reboot":
		err = reboot(ctx)
	case "down":
		err = testbed.Stop(ctx, os.Getenv(testbed.EnvDir))
	case "-h", "--help", "help":
		fmt.Println(usage)
	default:
		fmt.Fprintf(os.Stderr, "testbed: unknown command %q\n%s\n", os.Args[1], usage)
		os.Exit(2)
	}
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		os.Exit(exit.ExitCode())
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "testbed: %v\n", err)
		os.Exit(1)
	}
}

// commandArgs returns the command after "--", or exits with the usage.
func commandArgs() []string {
	args := os.Args[2:]
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	}
	return args
}

func up(ctx context.Context) error {
	cwd, err := os.Getwd()
	if err != nil {
		return err
	}
	tb, err := testbed.Up(ctx, testbed.Config{
		Dir:   os.Getenv(testbed.EnvDir),
		Binds: []string{cwd},
		Logf:  func(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) },
	})
	if err != nil {
		return err
	}
	fmt.Printf("testbed up: systemd pid %d; %s is visible inside; end it with `testbed down`\n", tb.PID, cwd)
	return nil
}

// status checks each part of the running testbed and prints one line each.
func status(ctx context.Context) error {
	tb, err := testbed.Attach(os.Getenv(testbed.EnvDir))
	if err != nil {
		return err
	}
	checks := []struct {
		name string
		argv []string
	}{
		{"systemd", []string{"systemctl", "is-system-running"}},
		{"system bus", []string{"busctl", "--system", "call", "org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus", "GetId"}},
		{"btrfs", []string{"btrfs", "subvolume", "show", tb.Btrfs.Project}},
		{"zfs", []string{"zpool", "list", "-H", "-o", "name,size,health", tb.ZFS.Pool}},
	}
	fmt.Printf("%-11s %s\n", "testbed", fmt.Sprintf("systemd pid %d, directory %s", tb.PID, tb.Dir))
	failed := 0
	for _, c := range checks {
		out, err := tb.Run(ctx, c.argv...)
		line := firstLine(out)
		if err != nil {
			failed++
			line = "FAILED: " + err.Error()
		}
		switch c.name {
		case "btrfs":
			if err == nil {
				line = fmt.Sprintf("%s on %s (subvolume %s)", tb.Btrfs.Mount, filepath.Base(tb.Btrfs.Image), tb.Btrfs.Project)
			}
		case "zfs":
			if err == nil {
				line = fmt.Sprintf("pool %s (dataset %s at %s)", strings.Join(strings.Fields(line), " "), tb.ZFS.Project, tb.ZFS.Mountpoint)
			}
		}
		fmt.Printf("%-11s %s\n", c.name, line)
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d checks failed", failed, len(checks))
	}
	return nil
}

// reboot reboots the running testbed (one of `testbed up`).
func reboot(ctx context.Context) error {
	tb, err := testbed.Attach(os.Getenv(testbed.EnvDir))
	if err != nil {
		return err
	}
	if err := tb.Reboot(ctx); err != nil {
		return err
	}
	fmt.Printf("testbed rebooted: systemd pid %d\n", tb.PID)
	return nil
}

func execInside(ctx context.Context, argv []string) error {
	tb, err := testbed.Attach(os.Getenv(testbed.EnvDir))
	if err != nil {
		return err
	}
	cwd, _ := os.Getwd()
	dir := "/"
	for _, b := range tb.Binds {
		if cwd == b || strings.HasPrefix(cwd, b+"/") {
			dir = cwd
		}
	}
	cmd := tb.Command(ctx, dir, argv...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	return cmd.Run()
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return line
}
