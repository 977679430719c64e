// Package projects is the core's project registry: the projects
// sandboxes are made of (sandboxd.toml's and those added at run time,
// recorded in the state store), who may use each, where each is seen, the
// environment of its units, how far it moved since a sandbox's base, the
// host services that write it, frozen while it is snapshotted, and its
// gate: one promotion of a project at a time, and which snapshot a
// create takes as its base while a promotion's stage is under way.
//
// It is a lower part of the core (supervisor), as state and audit are:
// the core holds one Registry and hands it what it needs at construction
// (its admission lock, the store, the audit log, the pool and systemd),
// so that this package imports no part of supervisor but its leaves.
package projects
