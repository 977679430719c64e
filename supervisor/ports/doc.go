// Package ports is the supervisor's room for the ports a sandbox exposes
// on the host (ExposePort, ClosePort): the daemon listens on a unix
// socket only the sandbox's owner (and root) may connect to and, if
// asked, on a loopback TCP port whose connecting socket must be the
// owner's, and carries each connection to that port on the sandbox's own
// loopback, whatever its network policy. It keeps the table of the ports
// served and bounds what their connections hold (per port, per owner, in
// all); the sandbox's record keeps its ports (state.Record.Ports), so
// that the daemon's next start exposes them again.
//
// It joins the core's hooks (supervisor.Hooks): Started exposes a
// record's ports again, Destroying closes a destroyed sandbox's, Close
// closes all, Busy says a connection is under way (an idle sandbox is
// frozen, one a connection uses is not). Through the Host it locks a
// sandbox, reads and updates its record, finds its init (InitPID: each
// connection dials into the init running now), wakes and touches it, and
// audits.
package ports
