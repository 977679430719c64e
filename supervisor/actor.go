package supervisor

import (
	"context"
	"fmt"

	"github.com/sandboxd/sandboxd/promote/unidiff"
)

// Identity is who makes a call, as the bus vouches for it.
type Identity struct {
	UID   uint32
	GIDs  []uint32 // primary and supplementary
	Admin bool     // root, or an admin of [access]
}

// Actor is who a call is made for: a caller the bus vouched for, or the
// daemon itself, naming its own work. Every check of authority takes
// one; a call that carries none is refused (ErrNoActor), never taken for
// the daemon's.
type Actor struct {
	Identity
	// Daemon names the daemon's own work ("expire", "promotion checks")
	// when no caller made the call ("": a caller's).
	Daemon string
	// named: made by Caller or Daemon. The zero Actor names no one and
	// may nothing (its UID 0 is no one's).
	named bool
}

// Caller is the actor of a call made by id.
func Caller(id Identity) Actor { return Actor{Identity: id, named: true} }

// Daemon is the actor of the daemon's own work, named by what.
func Daemon(what string) Actor {
	if what == "" {
		what = "daemon"
	}
	return Actor{Daemon: what, named: true}
}

// Named says whether a names someone: the zero Actor does not.
func (a Actor) Named() bool { return a.named }

// Privileged says whether a may do what root may: the daemon, root, an
// admin.
func (a Actor) Privileged() bool { return a.named && (a.Daemon != "" || a.UID == 0 || a.Admin) }

// String names a for the journal: "uid N" or the daemon's work.
func (a Actor) String() string {
	if a.Daemon != "" {
		return "daemon (" + a.Daemon + ")"
	}
	return fmt.Sprintf("uid %d", a.UID)
}

// ErrNoActor: a call that says for whom it is made neither by a caller's
// identity nor as the daemon's own: a bug of the caller, refused.
var ErrNoActor = fmt.Errorf("no caller named for the call: %w", ErrAccessDenied)

type actorKey struct{}

// WithActor marks ctx as a call made for a: the one whose right to use
// a project Create and Promote check, the caller the audit log records,
// and the one a unified diff shows only readable files to
// (unidiff.WithReader).
func WithActor(ctx context.Context, a Actor) context.Context {
	if a.Daemon == "" {
		ctx = unidiff.WithReader(ctx, unidiff.Reader{UID: a.UID, GIDs: a.GIDs})
	}
	return context.WithValue(ctx, actorKey{}, a)
}

// WithIdentity marks ctx as a call made by id (WithActor(Caller(id))).
func WithIdentity(ctx context.Context, id Identity) context.Context {
	return WithActor(ctx, Caller(id))
}

// WithCaller marks ctx as a call made by uid, neither in a group nor an
// admin (but root is root).
func WithCaller(ctx context.Context, uid uint32) context.Context {
	return WithIdentity(ctx, Identity{UID: uid})
}

// ActorOf is the actor ctx was marked with, or ErrNoActor.
func ActorOf(ctx context.Context) (Actor, error) {
	a, ok := ctx.Value(actorKey{}).(Actor)
	if !ok || !a.named {
		return Actor{}, ErrNoActor
	}
	return a, nil
}

// CallerUID is the uid of the caller ctx was marked with; false for the
// daemon's own work or an unmarked ctx.
func CallerUID(ctx context.Context) (uint32, bool) {
	a, err := ActorOf(ctx)
	if err != nil || a.Daemon != "" {
		return 0, false
	}
	return a.UID, true
}

// callerOf is CallerUID for the audit log: nil for the daemon's.
func callerOf(ctx context.Context) *uint32 {
	if uid, ok := CallerUID(ctx); ok {
		return &uid
	}
	return nil
}

// mayUseProject is MayUseProject for the actor of ctx, refused if none.
func (s *Supervisor) mayUseProject(ctx context.Context, name string) error {
	a, err := ActorOf(ctx)
	if err != nil {
		return err
	}
	return s.MayUseProject(ctx, a, name)
}
