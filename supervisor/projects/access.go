package projects

import (
	"context"
	"fmt"
	"os/user"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Access says who may use a project besides root and admins: the
// users and the members of the groups listed, by name or numeric id. With
// neither, the project's directory says: its owner, and the members of
// its group when the directory is group-writable. Names are looked up at
// each use, so a user or group made later counts at once.
type Access struct {
	Users  []string
	Groups []string
}

func (a Access) listed() bool { return len(a.Users)+len(a.Groups) > 0 }

func (a Access) clone() Access {
	return Access{Users: slices.Clone(a.Users), Groups: slices.Clone(a.Groups)}
}

// accountName is what a user or group may be written as: a number, or a
// name as useradd(8) takes it.
var accountName = regexp.MustCompile(`^(?:[0-9]+|[a-zA-Z_][a-zA-Z0-9_.-]{0,31}\$?)$`)

func (a Access) validate() error {
	for _, l := range []struct {
		what  string
		names []string
	}{{"user", a.Users}, {"group", a.Groups}} {
		for _, n := range l.names {
			if !accountName.MatchString(n) {
				return fmt.Errorf("%s %s is not a %s name or id", l.what, QuoteName(n), l.what)
			}
		}
	}
	return nil
}

// Who is a caller as a project's access sees it: its uid and groups, and
// whether it may do what root may (root, an admin, the daemon's own
// work), which may use every project.
type Who struct {
	UID        uint32
	GIDs       []uint32 // primary and supplementary
	Privileged bool
}

// MayUse says whether who may use project name: nil, or an error
// wrapping ErrAccessDenied that names the project, the caller and who
// may. An unknown project is nil here: the caller's own lookup tells
// that.
func (r *Registry) MayUse(ctx context.Context, who Who, name string) error {
	if who.Privileged {
		return nil
	}
	p, access, ok := r.getAccess(name)
	if !ok {
		return nil
	}
	if access.listed() {
		if access.allows(who) {
			return nil
		}
		return fmt.Errorf("uid %d may not use project %q: it is open to %s (and to root and admins): %w",
			who.UID, name, access.describe(), ErrAccessDenied)
	}
	vol, err := r.cfg.Backend.Project(ctx, p.Location)
	if err != nil {
		return fmt.Errorf("checking who may use project %q: %w", name, err)
	}
	return mayUseDir(who, name, vol.Path)
}

// mayUseDir says whether who may use project name, which lists no users
// or groups, by its directory dir: its owner may, and its group's
// members if it is group-writable.
func mayUseDir(who Who, name, dir string) error {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return fmt.Errorf("checking who may use project %q: stat of %s: %w", name, dir, err)
	}
	if st.Uid == who.UID || st.Mode&0o020 != 0 && slices.Contains(who.GIDs, st.Gid) {
		return nil
	}
	group := "its group is not"
	if st.Mode&0o020 != 0 {
		group = fmt.Sprintf("only gid %d, of which uid %d is not a member, may", st.Gid, who.UID)
	}
	return fmt.Errorf("uid %d may not use project %q: it lists no users or groups, so it is open to its directory's owner, uid %d, "+
		"and its group if the directory is group-writable (%s; mode %04o); an admin can add users = [...] or groups = [...] to it: %w",
		who.UID, name, st.Uid, group, st.Mode&0o7777, ErrAccessDenied)
}

// allows says whether id is one of the users or in one of the groups.
func (a Access) allows(id Who) bool {
	for _, u := range a.Users {
		if uid, ok := lookupID(u, func(n string) (string, error) {
			u, err := user.Lookup(n)
			if err != nil {
				return "", err
			}
			return u.Uid, nil
		}); ok && uid == id.UID {
			return true
		}
	}
	for _, g := range a.Groups {
		if gid, ok := lookupID(g, func(n string) (string, error) {
			g, err := user.LookupGroup(n)
			if err != nil {
				return "", err
			}
			return g.Gid, nil
		}); ok && slices.Contains(id.GIDs, gid) {
			return true
		}
	}
	return false
}

// lookupID is name's numeric id: name itself if it is a number, else what
// lookup finds (false when nothing does).
func lookupID(name string, lookup func(string) (string, error)) (uint32, bool) {
	if n, err := strconv.ParseUint(name, 10, 32); err == nil {
		return uint32(n), true
	}
	s, err := lookup(name)
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseUint(s, 10, 32)
	return uint32(n), err == nil
}

func (a Access) describe() string {
	var parts []string
	if len(a.Users) > 0 {
		parts = append(parts, "users "+strings.Join(a.Users, ", "))
	}
	if len(a.Groups) > 0 {
		parts = append(parts, "the members of groups "+strings.Join(a.Groups, ", "))
	}
	return strings.Join(parts, " and ")
}
