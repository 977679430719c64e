// Package verb is what each of sandboxctl's verbs is written with: the
// connection to sandboxd (Client: find a sandbox, call, wait for a
// command's end), the actions of a verb about one sandbox or all of them,
// its arguments, how it prints (Output: a table, JSON, or only ids), and
// its errors with the exit codes scripts branch on.
package verb
