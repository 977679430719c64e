// Package replica is the transport of a promotion's replica stages: a
// stage target (ParseTarget: the project, a path on this host or
// ssh://[user@]host[:port]/path), and a path or ssh target kept as a btrfs
// replica (Replica), to which send streams are received and whose path
// is switched to what was received, checked and reverted, each operation
// one shell script (scripts/*.sh) run there by `sh -c` or ssh.
package replica
