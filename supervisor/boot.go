package supervisor

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/sandboxd/sandboxd/runtime/nsinit"
	"github.com/sandboxd/sandboxd/supervisor/state"
)

// Booted sandboxes (CreateOptions.Boot) run a systemd of their own; the
// init's side is runtime/nsinit/boot.go, the design docs/boot.md.

// canBoot refuses a booted sandbox where its systemd would not be
// contained: without a user namespace it would be the host's root, and
// on the host's network its services would bind the host's ports.
func (s *Supervisor) canBoot(opts CreateOptions) error {
	if !opts.Boot {
		return nil
	}
	if opts.Network == nsinit.NetworkHost {
		return fmt.Errorf("%w: a booted sandbox needs a network of its own (none or allowlist), not the host's: its services would listen on the host", ErrInvalid)
	}
	if s.userns.unavailable != nil {
		return fmt.Errorf("%w: a booted sandbox's systemd must be root of a user namespace, or it would own the machine: %v", ErrNoIdmap, s.userns.unavailable)
	}
	return nil
}

// bootInScope starts the scope first (Delegate=yes), then makes the
// cgroups the init and its systemd live in, then has the init build its
// world and boot. On failure the init is killed and the scope stopped.
func (s *Supervisor) bootInScope(ctx context.Context, rec state.Record, job *scopeStart, init *nsinit.Init, spec nsinit.Spec, mounts *nsinit.Mounts) error {
	if err := job.wait(); err != nil {
		mounts.Close()
		init.Kill()
		return err
	}
	fail := func(err error) error {
		init.Kill()
		_ = s.stopScope(context.WithoutCancel(ctx), rec.Unit)
		return err
	}
	ids := nsIDs(rec.IDs)
	payload, err := nsinit.BootCgroups(init.PID, ids.RootUID(), ids.RootGID())
	if err != nil {
		mounts.Close()
		return fail(fmt.Errorf("booting sandbox %s: %w", rec.ID, err))
	}
	defer payload.Close()
	spec.Boot, spec.Payload, spec.LogDirs = true, payload, logDirs("/var/log", packagedUnder(dpkgLists, "/var/log"), ids)
	if err := init.Build(ctx, spec, mounts); err != nil {
		return fail(err)
	}
	return nil
}

// maxLogDirs bounds how many of the host's /var/log directories a
// booted sandbox gets (depth 3 at most).
const maxLogDirs = 256

// logDirs are the directories under dir (the host's /var/log) that a
// package installed (packaged, logdirs.go), with their owners and modes,
// for a booted sandbox's hidden, empty /var/log: services expect theirs.
// Others are not named to the sandbox. An owner the sandbox's namespace
// (ns) lacks is nobody there.
func logDirs(dir string, packaged map[string]bool, ns *nsinit.IDMap) []nsinit.Dir {
	var out []nsinit.Dir
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return nil
		}
		if !d.IsDir() {
			return nil
		}
		if !packaged[p] {
			return filepath.SkipDir // nor what is below: made by no package either
		}
		if strings.Count(strings.TrimPrefix(p, dir), "/") > 3 || len(out) >= maxLogDirs {
			return filepath.SkipDir
		}
		var st syscall.Stat_t
		if syscall.Lstat(p, &st) != nil {
			return filepath.SkipDir
		}
		out = append(out, hostDir(p, &st, ns))
		return nil
	})
	return out
}

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
func (s *Supervisor) System(ctx context.Context, id string, uid uint32) (SystemStatus, error) {
	var st SystemStatus
	rec, err := s.cfg.Store.Get(id)
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
	c, err := s.runCaptured(ctx, id, ExecOptions{Argv: []string{"/bin/sh", "-c", script}, UID: uid, AsRoot: true, Dir: "/",
		Timeout: systemStatusTimeout}, 16<<10)
	if err != nil {
		return st, fmt.Errorf("the system of sandbox %s: %w", id, err)
	}
	lines := strings.Split(strings.TrimSpace(c.Output), "\n")
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
