// Package try is the supervisor's room for best-of-N (Try): several
// sandboxes of one project, a variant (or an input) each, the variant
// then the same check run in each, side by side within a bound; each
// sandbox's changes counted and its usage read; the fastest that passed
// is the winner, and the sandboxes kept or destroyed as the caller asks.
//
// It is a caller of the core like any other: it makes and destroys its
// sandboxes through the Host (Create and Destroy, as the actor of the
// call's ctx), counts their changes with Host.WithChanges, reads their
// usage through the one extra of its Host (Usage), and runs its commands
// through the commands.Runner of its Config (the commands room). It
// joins no hook and keeps no table: a Try's state lives in its call.
package try
