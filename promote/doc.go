// Package promote is the engine that carries what a sandbox changed into
// a tree without trusting the tree it comes from: it orders a change list
// (plan), writes it (Apply), takes it back out (Restore), and finds
// conflicts and privileged files on the way. The supervisor drives the
// promotion's stages with it; a replica stage's transport is
// promote/replica, and the git-style diff of a change list is
// promote/unidiff.
package promote
