// Command sandboxctl controls sandboxd over D-Bus: see package cli, and
// `sandboxctl --help`.
package main

import (
	"context"
	"os"

	"github.com/sandboxd/sandboxd/cli"
)

// version is set at build time from `git describe` (see the Makefile).
var version = "dev"

func main() {
	os.Exit(cli.Run(context.Background(), version, os.Args, os.Stdout, os.Stderr))
}
