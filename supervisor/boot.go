package supervisor

import (
	"context"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/sandboxd/sandboxd/runtime/nsinit"
	"github.com/sandboxd/sandboxd/supervisor/state"
)

// Booted sandboxes (CreateOptions.Boot) run a systemd of their own; the
// init's side is runtime/nsinit/boot.go, the design docs/boot.md.

// canBoot refuses a booted sandbox where its systemd would not be
// contained: without a user namespace it would be the host's root, and
// on the host's network its services would bind the host's ports.
func (u *usernsState) canBoot(opts CreateOptions) error {
	if !opts.Boot {
		return nil
	}
	if opts.Network == nsinit.NetworkHost {
		return fmt.Errorf("%w: a booted sandbox needs a network of its own (none or allowlist), not the host's: its services would listen on the host", ErrInvalid)
	}
	if u.unavailable != nil {
		return fmt.Errorf("%w: a booted sandbox's systemd must be root of a user namespace, or it would own the machine: %v", ErrNoIdmap, u.unavailable)
	}
	return nil
}

// bootInScope starts the scope first (Delegate=yes), then makes the
// cgroups the init and its systemd live in, then has the init build its
// world and boot. On failure the init is killed and the scope stopped.
func (s *scopes) boot(ctx context.Context, rec state.Record, job *scopeStart, init *nsinit.Init, spec nsinit.Spec, mounts *nsinit.Mounts) error {
	if err := job.wait(); err != nil {
		mounts.Close()
		init.Kill()
		return err
	}
	fail := func(err error) error {
		init.Kill()
		_ = s.stop(context.WithoutCancel(ctx), rec.Unit)
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
