package supervisor

import (
	"context"
	"errors"
	"fmt"
	"os/user"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrAccessDenied: the caller may not use the project (make a sandbox of
// it, promote into it).
var ErrAccessDenied = errors.New("access denied")

// ProjectAccess says who may use a project besides root and admins: the
// users and the members of the groups listed, by name or numeric id. With
// neither, the project's directory says: its owner, and the members of
// its group when the directory is group-writable. Names are looked up at
// each use, so a user or group made later counts at once.
type ProjectAccess struct {
	Users  []string
	Groups []string
}

func (a ProjectAccess) listed() bool { return len(a.Users)+len(a.Groups) > 0 }

func (a ProjectAccess) clone() ProjectAccess {
	return ProjectAccess{Users: slices.Clone(a.Users), Groups: slices.Clone(a.Groups)}
}

// accountName is what a user or group may be written as: a number, or a
// name as useradd(8) takes it.
var accountName = regexp.MustCompile(`^(?:[0-9]+|[a-zA-Z_][a-zA-Z0-9_.-]{0,31}\$?)$`)

func (a ProjectAccess) validate() error {
	for _, l := range []struct {
		what  string
		names []string
	}{{"user", a.Users}, {"group", a.Groups}} {
		for _, n := range l.names {
			if !accountName.MatchString(n) {
				return fmt.Errorf("%s %s is not a %s name or id", l.what, quoteName(n), l.what)
			}
		}
	}
	return nil
}

// MayUseProject says whether a may use project name: nil, or an error
// wrapping ErrAccessDenied that names the project, the caller and who
// may. An unknown project is nil here: the caller's own lookup tells
// that.
func (s *Supervisor) MayUseProject(ctx context.Context, a Actor, name string) error {
	if !a.Named() {
		return fmt.Errorf("checking who may use project %q: %w", name, ErrNoActor)
	}
	if a.Privileged() {
		return nil
	}
	id := a.Identity
	p, access, ok := s.projects.getAccess(name)
	if !ok {
		return nil
	}
	if access.listed() {
		if access.allows(id) {
			return nil
		}
		return fmt.Errorf("uid %d may not use project %q: it is open to %s (and to root and admins): %w",
			id.UID, name, access.describe(), ErrAccessDenied)
	}
	vol, err := s.cfg.Backend.Project(ctx, p.Location)
	if err != nil {
		return fmt.Errorf("checking who may use project %q: %w", name, err)
	}
	var st unix.Stat_t
	if err := unix.Stat(vol.Path, &st); err != nil {
		return fmt.Errorf("checking who may use project %q: stat of %s: %w", name, vol.Path, err)
	}
	if st.Uid == id.UID || st.Mode&0o020 != 0 && slices.Contains(id.GIDs, st.Gid) {
		return nil
	}
	group := "its group is not"
	if st.Mode&0o020 != 0 {
		group = fmt.Sprintf("only gid %d, of which uid %d is not a member, may", st.Gid, id.UID)
	}
	return fmt.Errorf("uid %d may not use project %q: it lists no users or groups, so it is open to its directory's owner, uid %d, "+
		"and its group if the directory is group-writable (%s; mode %04o); an admin can add users = [...] or groups = [...] to it: %w",
		id.UID, name, st.Uid, group, st.Mode&0o7777, ErrAccessDenied)
}

// allows says whether id is one of the users or in one of the groups.
func (a ProjectAccess) allows(id Identity) bool {
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

func (a ProjectAccess) describe() string {
	var parts []string
	if len(a.Users) > 0 {
		parts = append(parts, "users "+strings.Join(a.Users, ", "))
	}
	if len(a.Groups) > 0 {
		parts = append(parts, "the members of groups "+strings.Join(a.Groups, ", "))
	}
	return strings.Join(parts, " and ")
}
