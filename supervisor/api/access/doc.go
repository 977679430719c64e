// Package access is the front door's authority over its callers: who a
// caller is (Identify: the uid and groups the bus vouches for), what the
// daemon's Policy lets it do (create sandboxes, see every one), and who
// hears the signals about a sandbox (Audience: its owner and admins
// only). It knows nothing of sandboxes beyond their owners' uids, so the
// supervisor's own checks (projects, promotions) stay the supervisor's.
package access
