// Package cli is sandboxctl, the command line that talks to sandboxd over
// D-Bus: its verbs, output formats and exit codes.
package cli
