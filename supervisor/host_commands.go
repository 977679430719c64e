package supervisor

// The core as the commands room (supervisor/commands) sees it, besides
// Host: why there is no user namespace (the user namespaces are the
// core's).

// UserNSUnavailable says why sandboxes get no user namespace (nil: they
// do).
func (h host) UserNSUnavailable() error { return h.s.userns.unavailable }
