// Package promotion is the supervisor's room that carries what a sandbox
// changed into its project and beyond: Promote plans a promotion (the
// change set, its conflicts with the project, the first rollback point)
// and records it; a driver then runs the configured stages in order in
// the background, each of its kind (Stage: the project itself, a path on
// this host, a replica over ssh), applied, checked and, if a check fails,
// undone; a stage an admin must approve waits (Approve, Reject). Every
// step is recorded before it is taken (state.Promotion), so that the
// daemon's start finishes or undoes what a crash cut short (its
// AfterReconcile hook), and the volumes of finished promotions go.
//
// The room is made over the core's Host (New) and joins its hooks; the
// project's gate (which snapshot a create takes while a stage is under
// way) stays the core's, reached through Host.
package promotion
