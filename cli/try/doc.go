// Package try is `sandboxctl try`: variants side by side, a sandbox each,
// with one check. The daemon's Try does the work; this asks, shows the
// results and, interrupted, says what became of the sandboxes it made.
package try
