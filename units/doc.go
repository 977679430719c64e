// Package units runs sandboxes as transient systemd units over the system
// bus: a sandbox-<id>.scope per sandbox, with its CPU, memory, tasks, IO and
// runtime limits, its live usage, and its end.
package units
