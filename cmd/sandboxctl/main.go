// Command sandboxctl controls sandboxd over D-Bus.
package main

import (
	"fmt"
	"os"
)

// version is set at build time from `git describe` (see the Makefile).
var version = "dev"

func main() {
	if len(os.Args) == 2 && (os.Args[1] == "--version" || os.Args[1] == "-V") {
		fmt.Println("sandboxctl", version)
		return
	}
	fmt.Fprintln(os.Stderr, "sandboxctl: no verbs yet (issue 7); only --version works")
	os.Exit(2)
}
