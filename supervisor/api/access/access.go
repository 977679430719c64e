package access

import (
	"context"
	"fmt"
	"os/user"
	"slices"
	"strconv"
	"sync"

	"github.com/godbus/dbus/v5"
)

// DefaultGroup is the group whose members may use sandboxd: the bus policy
// (packaging/dbus/org.sandboxd1.conf) lets them send to org.sandboxd1, and
// Default lets them create sandboxes.
const DefaultGroup = "sandboxd"

// Policy says who may do what through the API. The bus policy decides who
// may talk to sandboxd at all; Policy decides, per call, who may create
// sandboxes and who sees every sandbox rather than only their own.
//
// Root is always an admin, and an admin may always create. Everyone else
// sees and acts on only the sandboxes they own (that their uid created), so
// a caller who lost the right to create can still list and destroy its own.
type Policy struct {
	// CreatorUIDs and the members of CreatorGIDs may create sandboxes.
	CreatorUIDs []uint32
	CreatorGIDs []uint32
	// AdminUIDs and the members of AdminGIDs see and act on every sandbox.
	AdminUIDs []uint32
	AdminGIDs []uint32
}

// Default lets the members of DefaultGroup create sandboxes; only root is
// an admin. Without that group only root may create.
func Default() Policy {
	var a Policy
	if gid, err := GroupID(DefaultGroup); err == nil {
		a.CreatorGIDs = []uint32{gid}
	}
	return a
}

// Resolve builds a Policy from the configuration's names (or
// numeric ids) of users and groups. A name that does not resolve is left
// out and reported, not fatal: a group may be made after the daemon starts
// (and then counts from its next start).
func Resolve(creatorUsers, creatorGroups, adminUsers, adminGroups []string) (Policy, []error) {
	var a Policy
	var errs []error
	users := func(names []string, into *[]uint32) {
		for _, n := range names {
			if id, err := strconv.ParseUint(n, 10, 32); err == nil {
				*into = append(*into, uint32(id))
				continue
			}
			u, err := user.Lookup(n)
			if err != nil {
				errs = append(errs, fmt.Errorf("looking up user %q: %w", n, err))
				continue
			}
			id, err := strconv.ParseUint(u.Uid, 10, 32)
			if err != nil {
				errs = append(errs, fmt.Errorf("looking up user %q: uid %q is not a number", n, u.Uid))
				continue
			}
			*into = append(*into, uint32(id))
		}
	}
	groups := func(names []string, into *[]uint32) {
		for _, n := range names {
			if id, err := strconv.ParseUint(n, 10, 32); err == nil {
				*into = append(*into, uint32(id))
				continue
			}
			gid, err := GroupID(n)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			*into = append(*into, gid)
		}
	}
	users(creatorUsers, &a.CreatorUIDs)
	groups(creatorGroups, &a.CreatorGIDs)
	users(adminUsers, &a.AdminUIDs)
	groups(adminGroups, &a.AdminGIDs)
	return a, errs
}

// GroupID resolves a group's name to its gid (through NSS, as os/user does).
func GroupID(name string) (uint32, error) {
	g, err := user.LookupGroup(name)
	if err != nil {
		return 0, fmt.Errorf("looking up group %q: %w", name, err)
	}
	gid, err := strconv.ParseUint(g.Gid, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("looking up group %q: gid %q is not a number", name, g.Gid)
	}
	return uint32(gid), nil
}

// Caller is who sent a method call, as the bus vouches for it.
type Caller struct {
	Name  string   // its unique bus name
	UID   uint32   //
	GIDs  []uint32 // primary and supplementary
	Admin bool
}

// IsAdmin says whether uid, of groups gids, sees and acts on every
// sandbox.
func (a Policy) IsAdmin(uid uint32, gids []uint32) bool {
	return uid == 0 || slices.Contains(a.AdminUIDs, uid) || overlaps(a.AdminGIDs, gids)
}

// MayCreate says whether c may create sandboxes.
func (a Policy) MayCreate(c Caller) bool {
	return c.Admin || slices.Contains(a.CreatorUIDs, c.UID) || overlaps(a.CreatorGIDs, c.GIDs)
}

// Sees says whether c may see and act on a sandbox that owner made.
func (c Caller) Sees(owner uint32) bool { return c.Admin || c.UID == owner }

func overlaps(a, b []uint32) bool {
	for _, x := range a {
		if slices.Contains(b, x) {
			return true
		}
	}
	return false
}

// Identify asks the bus, on conn, who sender is; a says whether it is an
// admin. The groups are the ones the bus took from the connecting
// process (SO_PEERGROUPS): the very groups
// dbus-daemon (1.14 here) applies the bus policy with, so the daemon and
// the policy judge a caller alike. A bus that does not report them leaves
// the lookup of the uid's groups in NSS.
//
// Nothing is cached: it is one round trip to the bus per call, small next
// to what the calls do, and a cache keyed by unique names would have to
// follow NameOwnerChanged to forget callers that went away. The caller's
// name is remembered for one thing only: whom to send signals (Audience).
func Identify(ctx context.Context, conn *dbus.Conn, a Policy, sender dbus.Sender) (Caller, error) {
	var creds map[string]dbus.Variant
	err := conn.BusObject().CallWithContext(ctx, "org.freedesktop.DBus.GetConnectionCredentials", 0, string(sender)).Store(&creds)
	if err != nil {
		return Caller{}, fmt.Errorf("asking the bus who %s is: %w", sender, err)
	}
	uid, ok := creds["UnixUserID"].Value().(uint32)
	if !ok {
		return Caller{}, fmt.Errorf("asking the bus who %s is: no UnixUserID in %v", sender, creds)
	}
	gids, ok := creds["UnixGroupIDs"].Value().([]uint32)
	if !ok {
		if gids, err = userGroups(uid); err != nil {
			return Caller{}, fmt.Errorf("finding the groups of uid %d (calling as %s): %w", uid, sender, err)
		}
	}
	return Caller{Name: string(sender), UID: uid, GIDs: gids, Admin: a.IsAdmin(uid, gids)}, nil
}

// userGroups are the groups NSS lists for uid, primary first.
func userGroups(uid uint32) ([]uint32, error) {
	u, err := user.LookupId(strconv.FormatUint(uint64(uid), 10))
	if err != nil {
		return nil, err
	}
	ids, err := u.GroupIds()
	if err != nil {
		return nil, err
	}
	gids := make([]uint32, 0, len(ids))
	for _, id := range ids {
		if gid, err := strconv.ParseUint(id, 10, 32); err == nil {
			gids = append(gids, uint32(gid))
		}
	}
	return gids, nil
}

// Bounds of what an audience remembers. Unique bus names are never reused,
// so a name kept after its connection went away only costs its bytes; the
// bounds keep those few. A client that has many connections at once gets
// the signals on its newest maxNamesPerUID.
const (
	maxNamesPerUID = 32
	maxAdminNames  = 128
	maxAudienceIDs = 4096
)

// Audience says who hears the signals about a sandbox (SandboxNew,
// StateChanged, PropertiesChanged, SandboxRemoved): the connections of
// its owner and of admins, each sent its own copy (a signal with a
// destination), so that no other member of the group learns another
// user's sandbox ids. A connection is known once it made a call to the
// daemon (any method: ListSandboxes is enough); a client that only
// listens hears nothing. Its zero value is ready to use; its own lock
// guards the names, the caller's (the server's, which orders the signals)
// the owners.
type Audience struct {
	mu     sync.Mutex
	byUID  map[uint32][]string // unique names, newest last
	admins []string            // unique names of admins' connections, newest last
	// owners is the owner of each sandbox announced, for its removal.
	owners map[string]uint32
}

// Heard remembers c's connection, as its uid's and, for an admin, as an
// admin's.
func (a *Audience) Heard(c Caller) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.byUID == nil {
		a.byUID = map[uint32][]string{}
	}
	if c.Admin {
		a.admins = remember(a.admins, c.Name, maxAdminNames)
		return
	}
	if _, ok := a.byUID[c.UID]; !ok && len(a.byUID) >= maxAudienceIDs {
		for uid := range a.byUID { // forget some uid: one that calls again comes back
			delete(a.byUID, uid)
			break
		}
	}
	a.byUID[c.UID] = remember(a.byUID[c.UID], c.Name, maxNamesPerUID)
}

// remember puts name last in names, once, keeping at most max.
func remember(names []string, name string, max int) []string {
	if i := slices.Index(names, name); i >= 0 {
		if i == len(names)-1 {
			return names
		}
		names = slices.Delete(names, i, i+1)
	}
	names = append(names, name)
	if len(names) > max {
		names = slices.Delete(names, 0, len(names)-max)
	}
	return names
}

// Of is who hears about a sandbox of owner: owner's connections and
// admins'.
func (a *Audience) Of(owner uint32) []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := slices.Clone(a.admins)
	for _, n := range a.byUID[owner] {
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}

// SetOwner and Owner remember the owner of sandbox id until Forget. The
// caller serializes them (the server's lock).
func (a *Audience) SetOwner(id string, owner uint32) {
	if a.owners == nil {
		a.owners = map[string]uint32{}
	}
	a.owners[id] = owner
}

func (a *Audience) Owner(id string) (uint32, bool) {
	o, ok := a.owners[id]
	return o, ok
}

// Forget forgets the owner of sandbox id, which is gone.
func (a *Audience) Forget(id string) { delete(a.owners, id) }
