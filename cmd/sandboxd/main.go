// Command sandboxd is the sandboxing daemon: it owns the sandboxes of this
// host and serves the org.sandboxd1 D-Bus API on the system bus.
package main

import (
	"fmt"
	"os"
)

// version is set at build time from `git describe` (see the Makefile).
var version = "dev"

func main() {
	if len(os.Args) == 2 && (os.Args[1] == "--version" || os.Args[1] == "-V") {
		fmt.Println("sandboxd", version)
		return
	}
	fmt.Fprintln(os.Stderr, "sandboxd: the daemon's service loop is not built yet (issue 5); only --version works")
	os.Exit(1)
}
