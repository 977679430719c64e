// Package cowfs is sandboxd's copy-on-write engine: one small interface over
// btrfs subvolumes and ZFS datasets (create, snapshot, clone, roll back,
// diff, send and receive, quotas), so that a sandbox of a project of any
// size costs the same few milliseconds.
package cowfs
