// Package commands is sandboxctl's verbs that run commands in a sandbox
// and reach its files: exec and shell (the caller's stdio or terminal,
// signals passed on, the command's status), run, ps, logs and kill
// (background processes), repl (an interpreter kept between inputs), and
// cat and cp.
package commands
