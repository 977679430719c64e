package supervisor

import (
	"context"
	"fmt"
	"time"

	"github.com/sandboxd/sandboxd/supervisor/state"
)

// What the pool room (supervisor/pool) needs of the core beyond Host: a
// sandbox made ahead of time as a create like another would make it, and
// the claim that makes it that create's.

// CreatePooled makes a pool's sandbox like rec (optionsOf), with the
// actor of ctx (the daemon's): no time to live yet, within the caps
// without making room (Policy.AdmitPooled).
func (h host) CreatePooled(ctx context.Context, like state.Record) (Sandbox, error) {
	opts, err := optionsOf(like)
	if err != nil {
		return Sandbox{}, fmt.Errorf("making a pool's sandbox of %s: %w", like.Project, err)
	}
	opts.Pool = true
	return h.s.Create(ctx, opts)
}

// Claim makes pool sandbox id the create of want (Hooks.Claim): its name
// (unique among the records, checked under the admission lock as a
// create's), made now, its time to live and idle time from now; one whose
// init no longer runs is ErrWrongState (the pool makes a sandbox instead).
func (h host) Claim(ctx context.Context, id string, want state.Record, ttl time.Duration) (Sandbox, error) {
	s := h.s
	s.admission.Lock()
	err := nameFree(s.cfg.Store.Entries(), want.Name)
	// Under the lock, as a create's: a project removed (or moved) since
	// the create's check is not claimed from (its removal does not count
	// the pools' sandboxes).
	if err == nil && s.projects.Location(want.Project) != want.ProjectLocation {
		err = fmt.Errorf("it was removed meanwhile: %w", ErrUnknownProject)
	}
	if err == nil {
		_, err = s.cfg.Store.Update(id, func(r *state.Record) error {
			if !r.Pool {
				return fmt.Errorf("sandbox %s is no pool's: %w", id, ErrWrongState)
			}
			// A create hands out a running sandbox: not one whose init
			// ended in the pool (killed, out of memory), nor one frozen
			// or stopped.
			if st := s.worlds.currentState(id, r.State); !(state.Record{State: st}).Runs() {
				return fmt.Errorf("pool sandbox %s is %s: %w", id, st, ErrWrongState)
			}
			r.Pool, r.Name, r.Created, r.Expires = false, want.Name, time.Now().UTC(), time.Time{}
			if ttl > 0 {
				r.Expires = r.Created.Add(ttl)
			}
			return nil
		})
	}
	s.admission.Unlock()
	if err != nil {
		return Sandbox{}, fmt.Errorf("creating a sandbox of %s: %w", want.Project, err)
	}
	s.activity.Touch(id) // its idle time counts from now, as a create's
	s.events.changed(id)
	return s.Get(ctx, id)
}

// Creating is how many creates are under way, but for the pools' own: a
// pool refills when none is.
func (h host) Creating() int { return int(h.s.creating.Load()) }
