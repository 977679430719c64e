package api

import (
	"context"
	"fmt"
	"os/user"
	"slices"
	"strconv"
	"sync"

	"github.com/godbus/dbus/v5"

	"github.com/sandboxd/sandboxd/supervisor"
)

// DefaultGroup is the group whose members may use sandboxd: the bus policy
// (packaging/dbus/org.sandboxd1.conf) lets them send to org.sandboxd1, and
// DefaultAccess lets them create sandboxes.
const DefaultGroup = "sandboxd"

// Access says who may do what through the API. The bus policy decides who
// may talk to sandboxd at all; Access decides, per call, who may create
// sandboxes and who sees every sandbox rather than only their own.
//
// Root is always an admin, and an admin may always create. Everyone else
// sees and acts on only the sandboxes they own (that their uid created), so
// a caller who lost the right to create can still list and destroy its own.
type Access struct {
	// CreatorUIDs and the members of CreatorGIDs may create sandboxes.
	CreatorUIDs []uint32
	CreatorGIDs []uint32
	// AdminUIDs and the members of AdminGIDs see and act on every sandbox.
	AdminUIDs []uint32
	AdminGIDs []uint32
}

// DefaultAccess lets the members of DefaultGroup create sandboxes; only
// root is an admin. Without that group only root may create.
func DefaultAccess() Access {
	var a Access
	if gid, err := GroupID(DefaultGroup); err == nil {
		a.CreatorGIDs = []uint32{gid}
	}
	return a
}

// ResolveAccess builds an Access from the configuration's names (or
// numeric ids) of users and groups. A name that does not resolve is left
// out and reported, not fatal: a group may be made after the daemon starts
// (and then counts from its next start).
func ResolveAccess(creatorUsers, creatorGroups, adminUsers, adminGroups []string) (Access, []error) {
	var a Access
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

// caller is who sent a method call, as the bus vouches for it.
type caller struct {
	name  string   // its unique bus name
	uid   uint32   //
	gids  []uint32 // primary and supplementary
	admin bool
}

// identity is c as the supervisor knows callers: who uses a project, who
// a diff is written for, who the audit log names.
func (c caller) identity() supervisor.Identity {
	return supervisor.Identity{UID: c.uid, GIDs: c.gids, Admin: c.admin}
}

func (a Access) isAdmin(uid uint32, gids []uint32) bool {
	return uid == 0 || slices.Contains(a.AdminUIDs, uid) || overlaps(a.AdminGIDs, gids)
}

func (a Access) mayCreate(c caller) bool {
	return c.admin || slices.Contains(a.CreatorUIDs, c.uid) || overlaps(a.CreatorGIDs, c.gids)
}

// sees says whether c may see and act on a sandbox that owner made.
func (c caller) sees(owner uint32) bool { return c.admin || c.uid == owner }

func overlaps(a, b []uint32) bool {
	for _, x := range a {
		if slices.Contains(b, x) {
			return true
		}
	}
	return false
}

// identify asks the bus who sender is. The groups are the ones the bus
// took from the connecting process (SO_PEERGROUPS): the very groups
// dbus-daemon (1.14 here) applies the bus policy with, so the daemon and
// the policy judge a caller alike. A bus that does not report them leaves
// the lookup of the uid's groups in NSS.
//
// Nothing is cached: it is one round trip to the bus per call, small next
// to what the calls do, and a cache keyed by unique names would have to
// follow NameOwnerChanged to forget callers that went away. The caller's
// name is remembered for one thing only: whom to send signals (audience).
func (s *Server) identify(ctx context.Context, sender dbus.Sender) (caller, error) {
	var creds map[string]dbus.Variant
	err := s.conn.BusObject().CallWithContext(ctx, "org.freedesktop.DBus.GetConnectionCredentials", 0, string(sender)).Store(&creds)
	if err != nil {
		return caller{}, fmt.Errorf("asking the bus who %s is: %w", sender, err)
	}
	uid, ok := creds["UnixUserID"].Value().(uint32)
	if !ok {
		return caller{}, fmt.Errorf("asking the bus who %s is: no UnixUserID in %v", sender, creds)
	}
	gids, ok := creds["UnixGroupIDs"].Value().([]uint32)
	if !ok {
		if gids, err = userGroups(uid); err != nil {
			return caller{}, fmt.Errorf("finding the groups of uid %d (calling as %s): %w", uid, sender, err)
		}
	}
	c := caller{name: string(sender), uid: uid, gids: gids, admin: s.access.isAdmin(uid, gids)}
	s.aud.heard(c)
	return c, nil
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

// projectAccessOptions reads AddProjectWithOptions's options: Users and
// Groups, each an array of names or numeric ids.
func projectAccessOptions(opts map[string]dbus.Variant) (supervisor.ProjectAccess, error) {
	var a supervisor.ProjectAccess
	for name, v := range opts {
		list, ok := v.Value().([]string)
		switch {
		case name != "Users" && name != "Groups":
			return a, fmt.Errorf("option %s: unknown (known: Users as, Groups as)", name)
		case !ok:
			return a, fmt.Errorf("option %s has type %s; want as (names or numeric ids)", name, v.Signature())
		case name == "Users":
			a.Users = list
		default:
			a.Groups = list
		}
	}
	return a, nil
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

// audience says who hears the signals about a sandbox (SandboxNew,
// StateChanged, PropertiesChanged, SandboxRemoved): the connections of
// its owner and of admins, each sent its own copy (a signal with a
// destination), so that no other member of the group learns another
// user's sandbox ids. A connection is known once it made a call to the
// daemon (any method: ListSandboxes is enough); a client that only
// listens hears nothing. Its zero value is ready to use; the Server's mu
// guards the owners, its own lock the names.
type audience struct {
	mu     sync.Mutex
	byUID  map[uint32][]string // unique names, newest last
	admins []string            // unique names of admins' connections, newest last
	// owners is the owner of each sandbox announced, for its removal.
	owners map[string]uint32
}

// heard remembers c's connection, as its uid's and, for an admin, as an
// admin's.
func (a *audience) heard(c caller) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.byUID == nil {
		a.byUID = map[uint32][]string{}
	}
	if c.admin {
		a.admins = remember(a.admins, c.name, maxAdminNames)
		return
	}
	if _, ok := a.byUID[c.uid]; !ok && len(a.byUID) >= maxAudienceIDs {
		for uid := range a.byUID { // forget some uid: one that calls again comes back
			delete(a.byUID, uid)
			break
		}
	}
	a.byUID[c.uid] = remember(a.byUID[c.uid], c.name, maxNamesPerUID)
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

// of is who hears about a sandbox of owner: owner's connections and
// admins'.
func (a *audience) of(owner uint32) []string {
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

// setOwner and owner remember the owner of sandbox id until forget.
// The Server's mu is held.
func (a *audience) setOwner(id string, owner uint32) {
	if a.owners == nil {
		a.owners = map[string]uint32{}
	}
	a.owners[id] = owner
}

func (a *audience) owner(id string) (uint32, bool) {
	o, ok := a.owners[id]
	return o, ok
}

func (a *audience) forget(id string) { delete(a.owners, id) }
