package api_test

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/sandboxd/sandboxd/sandboxd1"
	"github.com/sandboxd/sandboxd/supervisor/api/access"
	"github.com/sandboxd/sandboxd/tests/testbed"
)

// The bus itself refuses a caller outside group sandboxd: its calls never
// reach the daemon, and it hears none of the daemon's signals, while a
// member who is an admin hears them (so the silence is the policy's
// doing).
func TestTheBusPolicyShutsOutNonMembers(t *testing.T) {
	setupBus(t)
	newEnv(t, access.Policy{AdminUIDs: []uint32{accounts[memberUser].uid}})
	c := newClient(t)

	res := callAs(t, nobody, "create", "web")
	if res.ErrorName != "org.freedesktop.DBus.Error.AccessDenied" {
		t.Fatalf("CreateSandbox as nobody: %+v; want the bus's org.freedesktop.DBus.Error.AccessDenied", res)
	}
	res = callAs(t, nobody, "list")
	if res.ErrorName != "org.freedesktop.DBus.Error.AccessDenied" {
		t.Fatalf("ListSandboxes as nobody: %+v; want the bus's AccessDenied", res)
	}

	outsider := listenAs(t, nobody)
	member := listenAs(t, accounts[memberUser])
	id, _ := c.mustCreate(nil)
	if err := c.destroy(id); err != nil {
		t.Fatal(err)
	}
	if heard := outsider.heard(t, c); len(heard) != 0 {
		t.Errorf("nobody heard %v; want no signal of org.sandboxd1", heard)
	}
	want := []string{sandboxd1.ManagerInterface + ".SandboxNew", sandboxd1.ManagerInterface + ".SandboxRemoved"}
	if heard := member.heard(t, c); !slices.Equal(heard, want) {
		t.Errorf("a member of group sandboxd, an admin, heard %v; want %v", heard, want)
	}
}

// A sandbox's signals name it: they go to its owner's connections and to
// admins', never to the other members of the group (who see only their
// own sandboxes in every other way too).
func TestSignalsReachOnlyTheOwnerAndAdmins(t *testing.T) {
	setupBus(t)
	creators := gidOf(t, creatorsGroup)
	e := newEnv(t, access.Policy{CreatorGIDs: []uint32{creators}})
	openToGroup(t, e.project, creators)
	c := newClient(t)
	creator, member := accounts[creatorUser], accounts[memberUser]

	owner := listenAs(t, creator)
	other := listenAs(t, member)
	admin := listenAs(t, account{name: "root"})
	res := callAs(t, creator, "create", "web")
	if res.ErrorName != "" {
		t.Fatalf("CreateSandbox as %s: %+v", creator.name, res)
	}
	if res := callAs(t, creator, "destroy", res.Result[0]); res.ErrorName != "" {
		t.Fatalf("DestroySandbox as %s: %+v", creator.name, res)
	}
	want := []string{sandboxd1.ManagerInterface + ".SandboxNew", sandboxd1.ManagerInterface + ".SandboxRemoved"}
	if heard := owner.heard(t, c); !slices.Equal(heard, want) {
		t.Errorf("the owner's other connection heard %v; want %v", heard, want)
	}
	if heard := admin.heard(t, c); !slices.Equal(heard, want) {
		t.Errorf("root heard %v; want %v", heard, want)
	}
	if heard := other.heard(t, c); len(heard) != 0 {
		t.Errorf("another member of group sandboxd heard %v about %s's sandbox; want nothing", heard, creator.name)
	}
}

// openToGroup makes dir (a project's) group-writable by gid, which lets
// that group's members use the project; the test's end puts it back.
func openToGroup(t *testing.T, dir string, gid uint32) {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(dir, &st); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, -1, int(gid)); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o775); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = os.Chown(dir, int(st.Uid), int(st.Gid))
		_ = os.Chmod(dir, os.FileMode(st.Mode&0o777))
	})
}

// A member of group sandboxd passes the bus, but the daemon lets only its
// creators create: the refusal names the caller's uid.
func TestTheDaemonRefusesAMemberWhoMayNotCreate(t *testing.T) {
	setupBus(t)
	e := newEnv(t, access.Policy{CreatorGIDs: []uint32{gidOf(t, creatorsGroup)}})
	member := accounts[memberUser]

	res := callAs(t, member, "create", "web")
	want := fmt.Sprintf("uid %d may not create sandboxes", member.uid)
	if res.ErrorName != sandboxd1.ErrorAccessDenied || !strings.Contains(res.Error, want) {
		t.Fatalf("CreateSandbox as %s: %+v; want %s saying %q", member.name, res, sandboxd1.ErrorAccessDenied, want)
	}
	// The same member, let in by uid, may create, but not of a project
	// whose directory is root's: the refusal names the project and the
	// caller.
	e.reserve(t, access.Policy{CreatorUIDs: []uint32{member.uid}})
	res = callAs(t, member, "create", "web")
	want = fmt.Sprintf(`uid %d may not use project "web"`, member.uid)
	if res.ErrorName != sandboxd1.ErrorAccessDenied || !strings.Contains(res.Error, want) {
		t.Fatalf("CreateSandbox of root's project as %s: %+v; want %s saying %q", member.name, res, sandboxd1.ErrorAccessDenied, want)
	}
	// Once the project's directory is group-writable by one of its groups,
	// it may.
	openToGroup(t, e.project, member.gid)
	res = callAs(t, member, "create", "web")
	if res.ErrorName != "" || len(res.Result) != 2 {
		t.Fatalf("CreateSandbox as %s, a creator by uid: %+v", member.name, res)
	}
	sb, err := e.sup.Get(ctx, res.Result[0])
	if err != nil || sb.Owner != member.uid {
		t.Fatalf("the sandbox %s made: %+v, %v; want it owned by uid %d", member.name, sb, err, member.uid)
	}
}

// A caller sees and touches only its own sandboxes; another user's are
// NoSuchSandbox to it, in the same words as an id that does not exist.
// Admins see all.
func TestOwnersSeeOnlyTheirOwnSandboxes(t *testing.T) {
	setupBus(t)
	creators := gidOf(t, creatorsGroup)
	e := newEnv(t, access.Policy{CreatorGIDs: []uint32{creators}})
	openToGroup(t, e.project, creators)
	c := newClient(t)
	creator := accounts[creatorUser]

	rootID, rootPath := c.mustCreate(nil)
	res := callAs(t, creator, "create", "web")
	if res.ErrorName != "" {
		t.Fatalf("CreateSandbox as %s: %+v", creator.name, res)
	}
	mine, minePath := res.Result[0], res.Result[1]

	if res := callAs(t, creator, "list"); res.ErrorName != "" || !slices.Equal(res.Result, []string{mine}) {
		t.Fatalf("ListSandboxes as %s: %+v; want only %s", creator.name, res, mine)
	}
	if res := callAs(t, creator, "prop", minePath, "Owner"); res.ErrorName != "" || res.Result[0] != fmt.Sprint(creator.uid) {
		t.Fatalf("its own sandbox's Owner: %+v; want %d", res, creator.uid)
	}
	for _, req := range [][]string{{"get", rootID}, {"destroy", rootID}, {"prop", string(rootPath), "State"}} {
		res := callAs(t, creator, req...)
		if res.ErrorName != sandboxd1.ErrorNoSuchSandbox || res.Error != fmt.Sprintf("no sandbox %q", rootID) {
			t.Errorf("%v as %s: %+v; want NoSuchSandbox as for an unknown id", req, creator.name, res)
		}
	}
	// Nor is it found by its id, or the start of it.
	for _, arg := range []string{rootID, rootID[:len(rootID)-1]} {
		res := callAs(t, creator, "find", arg)
		if res.ErrorName != sandboxd1.ErrorNoSuchSandbox || strings.Contains(res.Error, mine) {
			t.Errorf("FindSandbox(%s) as %s: %+v; want NoSuchSandbox", arg, creator.name, res)
		}
	}
	if res := callAs(t, creator, "find", mine[:len(mine)-1]); res.ErrorName != "" || !slices.Equal(res.Result, []string{mine}) {
		t.Errorf("FindSandbox(the start of its own) as %s: %+v; want %s", creator.name, res, mine)
	}
	if _, err := e.sup.Get(ctx, rootID); err != nil {
		t.Fatalf("root's sandbox after %s's attempts: %v", creator.name, err)
	}

	// Root, an admin, sees both.
	list, err := c.list()
	if err != nil || len(list) != 2 {
		t.Fatalf("ListSandboxes as root: %+v, %v; want both", list, err)
	}
	// So does an admin by group.
	e.reserve(t, access.Policy{CreatorGIDs: []uint32{creators}, AdminGIDs: []uint32{creators}})
	if res := callAs(t, creator, "list"); res.ErrorName != "" || len(res.Result) != 2 {
		t.Fatalf("ListSandboxes as %s, an admin by group: %+v; want both", creator.name, res)
	}
	if res := callAs(t, creator, "get", rootID); res.ErrorName != "" {
		t.Fatalf("GetSandbox(root's) as an admin: %+v", res)
	}
	if res := callAs(t, creator, "find", rootID); res.ErrorName != "" || !slices.Equal(res.Result, []string{rootID}) {
		t.Fatalf("FindSandbox(root's) as an admin: %+v", res)
	}

	// Its own it may destroy.
	if res := callAs(t, creator, "destroy", mine); res.ErrorName != "" {
		t.Fatalf("DestroySandbox of its own as %s: %+v", creator.name, res)
	}
}

func TestResolveAccessTakesNamesAndIDs(t *testing.T) {
	testbed.Require(t)
	a, errs := access.Resolve([]string{"root", "1234"}, []string{"root", "no-such-group-xyz"}, []string{"nobody"}, nil)
	if fmt.Sprint(a.CreatorUIDs) != "[0 1234]" || fmt.Sprint(a.CreatorGIDs) != "[0]" || fmt.Sprint(a.AdminUIDs) != "[65534]" {
		t.Fatalf("ResolveAccess = %+v", a)
	}
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), "no-such-group-xyz") {
		t.Fatalf("ResolveAccess errors = %v; want one naming the unknown group", errs)
	}
}
