package idmap

import (
	"os/user"
	"slices"
	"strconv"
	"sync"
	"time"
)

// A block's first id must be no account's (Allocate). The files
// (/etc/passwd, /etc/group, /etc/subuid, /etc/subgid) are read at each
// create, under the admission lock; an account the name service knows
// from elsewhere (LDAP, sssd, systemd's userdb) is asked of it, through
// NSS: two lookups (a user, a group), each of which may cross a socket
// (nss-systemd asks systemd's varlink services, sssd its daemon). They
// were made on the create's path, under the admission lock.
//
// Now a base the name service said no account has is taken on that word
// for accountTTL after the lookup began, and the next create's candidate
// is looked up ahead, in the background, once a block is taken: the
// create finds its answer made. The rule holds as before: a block is
// taken only if the name service said, within accountTTL, that no account
// has its first id; the name services' own caches give any lookup that
// much staleness already (sssd's entry_negative_timeout is 15 s, nscd's
// negative-time-to-live 20 s), and no lookup ever covered an account made
// after the block was taken: what keeps those apart is the configured
// range (sandbox.userns_first_id, kept apart from other id sources). A
// base that is an account's is remembered as such (skipping it is always
// safe).
const accountTTL = 15 * time.Second

// accounts is what the name service said of block bases.
type accounts struct {
	// lookup asks the name service whether id is an account's (a user's
	// or a group's); tests replace it.
	lookup func(id uint32) bool
	mu     sync.Mutex
	free   map[uint32]time.Time     // no account's, by a lookup begun then
	taken  map[uint32]bool          // an account's
	asking map[uint32]chan struct{} // lookups under way
	ahead  bool                     // a look-ahead runs
}

var names = &accounts{lookup: accountHas}

// has reports whether id is an account's, by the name service's word of
// at most accountTTL ago, asking it if need be.
func (a *accounts) has(id uint32) bool {
	for {
		a.mu.Lock()
		if a.free == nil {
			a.free, a.taken, a.asking = map[uint32]time.Time{}, map[uint32]bool{}, map[uint32]chan struct{}{}
		}
		if t, ok := a.free[id]; ok && time.Since(t) < accountTTL {
			a.mu.Unlock()
			return false
		}
		if a.taken[id] {
			a.mu.Unlock()
			return true
		}
		wait, ok := a.asking[id]
		if !ok {
			break // a.mu held: ask
		}
		a.mu.Unlock()
		<-wait // someone asks: take its answer
	}
	done := make(chan struct{})
	a.asking[id] = done
	a.mu.Unlock()
	began := time.Now()
	has := a.lookup(id)
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.asking, id)
	close(done)
	if has {
		a.taken[id] = true
	} else {
		a.free[id] = began
	}
	for k, t := range a.free { // forget what is stale
		if time.Since(t) >= accountTTL {
			delete(a.free, k)
		}
	}
	return has
}

// lookAhead asks, in the background, about the block the next create
// would take (held: the blocks held now, the one just taken included),
// unless a look-ahead runs.
func (a *accounts) lookAhead(held map[uint32]bool, reserved []idSpan, r Range) {
	a.mu.Lock()
	if a.ahead {
		a.mu.Unlock()
		return
	}
	a.ahead = true
	a.mu.Unlock()
	reserved = slices.Clone(reserved)
	go func() {
		defer func() { a.mu.Lock(); a.ahead = false; a.mu.Unlock() }()
		for range 4 { // past a few accounts' bases, as Allocate goes
			base, err := freeBase(held, reserved, r)
			if err != nil || !a.has(base) {
				return
			}
			reserved = append(reserved, idSpan{first: uint64(base), count: 1})
		}
	}()
}

// accountHas reports whether the name service knows id as a user's or a
// group's.
func accountHas(id uint32) bool {
	n := strconv.FormatUint(uint64(id), 10)
	if _, err := user.LookupId(n); err == nil {
		return true
	}
	_, err := user.LookupGroupId(n)
	return err == nil
}
