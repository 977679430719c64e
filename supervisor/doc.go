// Package supervisor is the sandboxd daemon: the sandbox lifecycle, its
// crash-safe state, reconciliation at start, and the D-Bus API on the system
// bus (org.sandboxd1).
package supervisor
