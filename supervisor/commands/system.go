package commands

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// A booted sandbox's systemd (CreateOptions.Boot), asked how it is: the
// core boots it (boot.go), this room runs its systemctl.

// SystemStatus is a booted sandbox's systemd's state, as `systemctl
// is-system-running` says it ("running", "degraded", "starting",
// "stopping", "offline" once it has ended), and its failed units.
type SystemStatus struct {
	State  string
	Failed []string
}

// ErrNotBooted: the sandbox runs no systemd of its own.
var ErrNotBooted = errors.New("the sandbox was not created with boot")

// systemStatusTimeout bounds a SystemStatus call.
const systemStatusTimeout = 5 * time.Second

// maxFailedUnits bounds the failed units a status lists.
const maxFailedUnits = 64

// System asks sandbox id's systemd how it is, by running systemctl in the
// sandbox as its root (uid is the caller's, for the audit): the daemon
// never speaks to a socket the sandbox made.
func (c *Commands) System(ctx context.Context, id string, uid uint32) (SystemStatus, error) {
	var st SystemStatus
	rec, err := c.h.Store().Get(id)
	if err != nil {
		return st, fmt.Errorf("the system of sandbox %s: %w", id, err)
	}
	if !rec.Boot {
		return st, fmt.Errorf("the system of sandbox %s: %w", id, ErrNotBooted)
	}
	const script = `systemctl is-system-running 2>/dev/null | head -n 1; ` +
		`systemctl list-units --state=failed --plain --no-legend --no-pager 2>/dev/null | head -n 64`
	// The sandbox's root decides what its systemctl does, and when it
	// ends: the call (a heavy one) does not wait longer than this, and
	// the command is ended with it.
	ctx, cancel := context.WithTimeout(ctx, systemStatusTimeout)
	defer cancel()
	out, err := c.RunCaptured(ctx, id, ExecOptions{Argv: []string{"/bin/sh", "-c", script}, UID: uid, AsRoot: true, Dir: "/",
		Timeout: systemStatusTimeout}, 16<<10)
	if err != nil {
		return st, fmt.Errorf("the system of sandbox %s: %w", id, err)
	}
	lines := strings.Split(strings.TrimSpace(out.Output), "\n")
	st.State = clean(lines[0])
	if st.State == "" {
		st.State = "offline"
	}
	for _, l := range lines[1:] {
		if f := strings.Fields(l); len(f) > 0 && len(st.Failed) < maxFailedUnits {
			if name := clean(f[0]); name != "" && !slices.Contains(st.Failed, name) {
				st.Failed = append(st.Failed, name)
			}
		}
	}
	return st, nil
}

// clean keeps what a unit name or a state may hold (what the sandbox's
// systemctl printed is the sandbox's to choose).
func clean(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 256 {
		s = s[:256]
	}
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_.@:\\", r) {
			return r
		}
		return -1
	}, s)
}
