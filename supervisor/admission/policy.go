package admission

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/sandboxd/sandboxd/supervisor/state"
	"github.com/sandboxd/sandboxd/units"
)

var (
	// ErrLimitReached: a create that admission control refuses (too many
	// sandboxes, for the host or the caller, or too much memory promised).
	ErrLimitReached = errors.New("limit reached")
	// ErrInvalid: options that make no sense (a negative TTL, bad limits,
	// a bad name); supervisor.ErrInvalid.
	ErrInvalid = errors.New("invalid sandbox options")
)

// Request is what admission fills in and checks of a create: the
// settings a caller may leave unset, and (Hidden, ReadOnly) the host
// paths it gets from the host and its profile.
type Request struct {
	Profile         string
	Network         string
	Allow           []string
	Limits          units.Limits
	DiskQuota       uint64
	TTL             time.Duration
	ReadOnlyProject *bool
	// Hidden and ReadOnly are set by Profiles.Resolve.
	Hidden, ReadOnly []string
}

// Policy is admission control and time to live. Zero fields: no cap.
type Policy struct {
	MaxSandboxes int
	MaxPerOwner  int
	// DestroyOldest: a create beyond MaxPerOwner destroys the owner's
	// oldest sandbox first, instead of being refused.
	DestroyOldest bool
	// MaxAdoptionsPerOwner caps the directories a member (not an admin)
	// has adopted as its own projects, under way or done.
	MaxAdoptionsPerOwner int
	// MaxMemory caps the sum of the live sandboxes' MemoryMax; with it, a
	// sandbox needs a MemoryMax (its own, DefaultMemoryMax or the one
	// derived from the host).
	MaxMemory        uint64
	DefaultMemoryMax uint64
	DefaultTTL       time.Duration
	MaxTTL           time.Duration
}

// ApplyDefaults fills what the policy gives a create that did not say.
func (p Policy) ApplyDefaults(r *Request) error {
	if r.TTL == 0 {
		r.TTL = p.DefaultTTL
	}
	if p.MaxTTL > 0 && r.TTL > p.MaxTTL {
		return fmt.Errorf("time to live %v is over the host's maximum of %v: %w", r.TTL, p.MaxTTL, ErrInvalid)
	}
	if r.Limits.MemoryMax == nil && p.DefaultMemoryMax > 0 {
		r.Limits.MemoryMax = &p.DefaultMemoryMax
	}
	return nil
}

// Admit checks a create of owner's, asking for memoryMax (nil: none),
// against the caps, given the live records oldest first (Live); it
// returns the sandboxes to destroy first: the owner's oldest
// (DestroyOldest), and warm pools' sandboxes (Entry.Pool), which count
// against every cap but give way to a create (the owner's own first).
func (p Policy) Admit(live []state.Entry, owner uint32, memoryMax *uint64) ([]state.Entry, error) {
	var pooled, claimed []state.Entry
	for _, e := range live {
		if e.Pool {
			pooled = append(pooled, e)
		} else {
			claimed = append(claimed, e)
		}
	}
	evict, err := p.admit(claimed, owner, memoryMax)
	if err != nil {
		return nil, err
	}
	// The pools' sandboxes the caps have no room for beside it.
	count, own, promised := len(claimed)-len(evict)+1, 1, memoryOf(memoryMax)
	for _, e := range claimed {
		if e.Owner == owner {
			own++
		}
		promised += memoryOf(limitsOf(e).MemoryMax)
	}
	for _, e := range evict {
		own--
		promised -= memoryOf(limitsOf(e).MemoryMax)
	}
	slices.SortStableFunc(pooled, func(a, b state.Entry) int { return cmpBool(a.Owner != owner, b.Owner != owner) })
	for _, e := range pooled {
		count++
		if e.Owner == owner {
			own++
		}
		promised += memoryOf(limitsOf(e).MemoryMax)
	}
	for _, e := range pooled {
		over := p.MaxSandboxes > 0 && count > p.MaxSandboxes ||
			p.MaxPerOwner > 0 && own > p.MaxPerOwner && e.Owner == owner ||
			p.MaxMemory > 0 && promised > p.MaxMemory
		if !over {
			continue
		}
		evict = append(evict, e)
		count--
		if e.Owner == owner {
			own--
		}
		promised -= memoryOf(limitsOf(e).MemoryMax)
	}
	return evict, nil
}

// AdmitPooled checks a warm pool's create of a sandbox of owner's: it
// must fit every cap beside all live sandboxes, pooled or not, and
// makes no room.
func (p Policy) AdmitPooled(live []state.Entry, owner uint32, memoryMax *uint64) error {
	evict, err := p.admit(live, owner, memoryMax)
	if err == nil && len(evict) > 0 {
		err = fmt.Errorf("uid %d is at its limit of sandboxes (limits.max_sandboxes_per_user): a pool makes no room: %w", owner, ErrLimitReached)
	}
	return err
}

func (p Policy) admit(live []state.Entry, owner uint32, memoryMax *uint64) ([]state.Entry, error) {
	if p.MaxSandboxes > 0 && len(live) >= p.MaxSandboxes {
		return nil, fmt.Errorf("%d sandboxes are alive, the host's limit (limits.max_sandboxes): %w", len(live), ErrLimitReached)
	}
	var own []state.Entry
	var promised uint64
	for _, r := range live {
		if r.Owner == owner {
			own = append(own, r)
		}
		var l units.Limits
		if p.MaxMemory > 0 && len(r.Limits) > 0 && json.Unmarshal(r.Limits, &l) == nil && l.MemoryMax != nil {
			promised += *l.MemoryMax
		}
	}
	var evict []state.Entry
	if p.MaxPerOwner > 0 && len(own) >= p.MaxPerOwner {
		if !p.DestroyOldest {
			return nil, fmt.Errorf("uid %d has %d sandboxes alive, the limit per user (limits.max_sandboxes_per_user); destroy one first: %w", owner, len(own), ErrLimitReached)
		}
		evict = own[:len(own)-p.MaxPerOwner+1] // live is oldest first
	}
	if p.MaxMemory > 0 {
		if memoryMax == nil {
			return nil, fmt.Errorf("a MemoryMax is required: the host caps the memory of all sandboxes (limits.max_memory): %w", ErrInvalid)
		}
		for _, r := range evict {
			var l units.Limits
			if json.Unmarshal(r.Limits, &l) == nil && l.MemoryMax != nil {
				promised -= *l.MemoryMax
			}
		}
		if promised+*memoryMax > p.MaxMemory {
			return nil, fmt.Errorf("MemoryMax %d would bring the memory promised to sandboxes to %d, over the host's %d (limits.max_memory): ask for less (--memory) or destroy a sandbox: %w",
				*memoryMax, promised+*memoryMax, p.MaxMemory, ErrLimitReached)
		}
	}
	return evict, nil
}

func limitsOf(e state.Entry) (l units.Limits) {
	if len(e.Limits) > 0 {
		_ = json.Unmarshal(e.Limits, &l)
	}
	return l
}

func memoryOf(m *uint64) uint64 {
	if m == nil {
		return 0
	}
	return *m
}

func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

// Live lists the records of sandboxes that count against the caps.
func Live(recs []state.Entry) []state.Entry {
	var out []state.Entry
	for _, r := range recs {
		if r.State != state.Destroying {
			out = append(out, r)
		}
	}
	return out
}
