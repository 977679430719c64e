package api_test

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/godbus/dbus/v5"

	"github.com/sandboxd/sandboxd/sandboxd1"
	"github.com/sandboxd/sandboxd/supervisor"
	"github.com/sandboxd/sandboxd/supervisor/api"
	"github.com/sandboxd/sandboxd/supervisor/api/access"
	"github.com/sandboxd/sandboxd/tests/testbed"
)

var subvolumes atomic.Int64

// subvolume makes a btrfs subvolume on the pool's filesystem holding
// index.html with text, as an operator would before AddProject; it is
// deleted when the test ends.
func subvolume(t *testing.T, text string) string {
	t.Helper()
	tb := testbed.Require(t)
	path := filepath.Join(tb.Btrfs.Mount, fmt.Sprintf("api-proj-%d-%d", os.Getpid(), subvolumes.Add(1)))
	testbed.MustRun(t, "btrfs", "subvolume", "create", path)
	t.Cleanup(func() { _, _ = runErr("btrfs", "subvolume", "delete", path) })
	if err := os.WriteFile(filepath.Join(path, "index.html"), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func (c *client) listProjects() []sandboxd1.ProjectEntry {
	c.t.Helper()
	var out []sandboxd1.ProjectEntry
	if err := c.manager().CallWithContext(ctx, sandboxd1.ManagerInterface+".ListProjects", 0).Store(&out); err != nil {
		c.t.Fatalf("ListProjects: %v", err)
	}
	return out
}

func (c *client) addProject(name, location string) error {
	return c.manager().CallWithContext(ctx, sandboxd1.ManagerInterface+".AddProject", 0, name, location).Err
}

func (c *client) removeProject(name string) error {
	return c.manager().CallWithContext(ctx, sandboxd1.ManagerInterface+".RemoveProject", 0, name).Err
}

func named(name string) map[string]dbus.Variant {
	return map[string]dbus.Variant{"Name": dbus.MakeVariant(name)}
}

func TestAnAddedProjectTakesCreatesAndIsRemovedOnceEmpty(t *testing.T) {
	e := newEnv(t, access.Policy{})
	c := newClient(t)
	extra := subvolume(t, "<h1>extra</h1>\n")

	if err := c.addProject("extra", extra); err != nil {
		t.Fatalf("AddProject(extra, %s) as root: %v", extra, err)
	}
	want := []sandboxd1.ProjectEntry{{Name: "extra", Location: extra, Origin: "added"}, {Name: "web", Location: e.project, Origin: "config"}}
	if got := c.listProjects(); !slices.Equal(got, want) {
		t.Fatalf("ListProjects = %+v; want %+v", got, want)
	}

	// A named sandbox of it: its copy of the project, its name listed.
	id, path, err := c.create("extra", named("agent-1"))
	if err != nil {
		t.Fatalf("CreateSandbox(extra, Name agent-1): %v", err)
	}
	props, err := c.props(path)
	if err != nil {
		t.Fatal(err)
	}
	if props["Name"].Value() != "agent-1" || props["Project"].Value() != "extra" {
		t.Fatalf("Name, Project = %v, %v; want agent-1, extra", props["Name"], props["Project"])
	}
	files := props["Path"].Value().(string)
	if data, err := os.ReadFile(filepath.Join(files, "index.html")); err != nil || string(data) != "<h1>extra</h1>\n" {
		t.Fatalf("index.html in the sandbox of extra: %q, %v", data, err)
	}
	list, err := c.list()
	if err != nil || len(list) != 1 || list[0].ID != id || list[0].Name != "agent-1" || list[0].Project != "extra" || list[0].Object != path {
		t.Fatalf("ListSandboxes = %+v, %v; want %s named agent-1, of extra", list, err, id)
	}
	// The name is the host's, not the project's or the user's.
	_, _, err = c.create("web", named("agent-1"))
	wantError(t, "a second sandbox named agent-1", err, sandboxd1.ErrorExists, `a sandbox named "agent-1" exists; pick another name or destroy it`)

	err = c.removeProject("extra")
	wantError(t, "RemoveProject of a project with a sandbox", err, sandboxd1.ErrorWrongState, `1 sandboxes of project "extra" exist; destroy them first`)
	if err := c.destroy(id); err != nil {
		t.Fatal(err)
	}
	if err := c.removeProject("extra"); err != nil {
		t.Fatalf("RemoveProject(extra) once its sandbox is gone: %v", err)
	}
	if got := c.listProjects(); !slices.Equal(got, want[1:]) {
		t.Fatalf("ListProjects after RemoveProject = %+v; want only web", got)
	}
	_, _, err = c.create("extra", nil)
	wantError(t, "CreateSandbox of the removed project", err, sandboxd1.ErrorNoSuchProject, `"extra"`)
	// Its files are the operator's: untouched.
	if data, err := os.ReadFile(filepath.Join(extra, "index.html")); err != nil || string(data) != "<h1>extra</h1>\n" {
		t.Fatalf("the removed project's index.html: %q, %v", data, err)
	}
	// The destroyed sandbox's name is free again.
	if _, _, err := c.create("web", named("agent-1")); err != nil {
		t.Fatalf("CreateSandbox named agent-1 after the first was destroyed: %v", err)
	}
	if sbs, _ := e.sup.List(ctx); len(sbs) != 1 {
		t.Fatalf("sandboxes: %+v; want the one named agent-1", sbs)
	}
}

func TestProjectChangesThatCannotBeDoneAreRefusedAndChangeNothing(t *testing.T) {
	tb := testbed.Require(t)
	e := newEnv(t, access.Policy{})
	c := newClient(t)
	plain, err := os.MkdirTemp(tb.Btrfs.Mount, "api-plain-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(plain) })
	missing := filepath.Join(tb.Btrfs.Mount, "api-no-such-project")
	if err := c.addProject("dup", subvolume(t, "dup\n")); err != nil {
		t.Fatal(err)
	}
	other := subvolume(t, "other\n")

	for _, tc := range []struct {
		what, name, location string
		errName              string
		words                []string
	}{
		{"a plain directory", "plain", plain, sandboxd1.ErrorInvalidArgs, []string{plain, "not a btrfs subvolume", "btrfs subvolume create"}},
		{"a missing path", "missing", missing, sandboxd1.ErrorInvalidArgs, []string{missing, "btrfs subvolume create"}},
		{"a dataset's name on btrfs", "rel", "tank/data", sandboxd1.ErrorInvalidArgs, []string{"tank/data", "not an absolute path"}},
		{"a name with a space", "a b", other, sandboxd1.ErrorInvalidArgs, []string{`"a b"`, "not a valid name", "letters, digits"}},
		{"a name with a slash", "../x", other, sandboxd1.ErrorInvalidArgs, []string{`"../x"`, "not a valid name"}},
		{"the name of a project of sandboxd.toml", "web", other, sandboxd1.ErrorExists, []string{`a project named "web" is defined in sandboxd.toml`}},
		{"the name of an added project", "dup", other, sandboxd1.ErrorExists, []string{`a project named "dup" exists`}},
	} {
		wantError(t, "AddProject with "+tc.what, c.addProject(tc.name, tc.location), tc.errName, tc.words...)
	}
	wantError(t, "RemoveProject of sandboxd.toml's project", c.removeProject("web"), sandboxd1.ErrorInvalidArgs,
		`project "web" is defined in sandboxd.toml; remove it there`)
	wantError(t, "RemoveProject of an unknown project", c.removeProject("nope"), sandboxd1.ErrorNoSuchProject, `"nope"`, "unknown project")

	want := []string{"dup", "web"}
	var got []string
	for _, p := range c.listProjects() {
		got = append(got, p.Name)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("projects after the refused calls: %v; want %v", got, want)
	}
	if ps, err := e.store.Projects(); err != nil || len(ps) != 1 || ps[0].Name != "dup" {
		t.Fatalf("the recorded projects: %+v, %v; want only dup", ps, err)
	}
}

// Changing the projects is for root and admins; listing them, for anyone
// the bus lets in.
func TestOnlyRootAndAdminsChangeTheProjects(t *testing.T) {
	setupBus(t)
	creators := gidOf(t, creatorsGroup)
	e := newEnv(t, access.Policy{CreatorGIDs: []uint32{creators}})
	c := newClient(t)
	creator, member := accounts[creatorUser], accounts[memberUser]
	mine := subvolume(t, "mine\n")

	res := callAs(t, creator, "addproject", "mine", mine)
	if res.ErrorName != sandboxd1.ErrorAccessDenied || !strings.Contains(res.Error, fmt.Sprintf("uid %d may not add projects", creator.uid)) ||
		!strings.Contains(res.Error, "only root and admins") {
		t.Fatalf("AddProject as %s, a creator: %+v; want %s saying who may", creator.name, res, sandboxd1.ErrorAccessDenied)
	}
	shared := subvolume(t, "shared\n")
	if err := c.addProject("shared", shared); err != nil {
		t.Fatal(err)
	}
	res = callAs(t, creator, "removeproject", "shared")
	if res.ErrorName != sandboxd1.ErrorAccessDenied || !strings.Contains(res.Error, "may not remove projects") {
		t.Fatalf("RemoveProject as %s: %+v; want %s", creator.name, res, sandboxd1.ErrorAccessDenied)
	}
	// A member lists the projects it may use: none of root's, until one is
	// group-writable by its group.
	res = callAs(t, member, "listprojects")
	if res.ErrorName != "" || len(res.Result) != 0 {
		t.Fatalf("ListProjects as %s: %+v; want none (both projects are root's)", member.name, res)
	}
	openToGroup(t, shared, member.gid)
	res = callAs(t, member, "listprojects")
	if want := []string{"shared " + shared + " added"}; res.ErrorName != "" || !slices.Equal(res.Result, want) {
		t.Fatalf("ListProjects as %s: %+v; want %v", member.name, res, want)
	}
	if list := c.listProjects(); len(list) != 2 {
		t.Fatalf("ListProjects as root: %+v; want both", list)
	}

	// An admin by group may.
	e.reserve(t, access.Policy{CreatorGIDs: []uint32{creators}, AdminGIDs: []uint32{creators}})
	if res := callAs(t, creator, "addproject", "mine", mine); res.ErrorName != "" {
		t.Fatalf("AddProject as %s, an admin by group: %+v", creator.name, res)
	}
	if res := callAs(t, creator, "removeproject", "shared"); res.ErrorName != "" {
		t.Fatalf("RemoveProject as %s, an admin by group: %+v", creator.name, res)
	}
	var got []string
	for _, p := range c.listProjects() {
		got = append(got, p.Name+" "+p.Origin)
	}
	if want := []string{"mine added", "web config"}; !slices.Equal(got, want) {
		t.Fatalf("ListProjects after the admin's changes = %v; want %v", got, want)
	}
}

// A project added is recorded: a new supervisor and server on the same
// state (the daemon restarted) have it. A project of the configuration
// with the same name wins over it.
func TestAnAddedProjectOutlivesARestart(t *testing.T) {
	e := newEnv(t, access.Policy{})
	c := newClient(t)
	kept := subvolume(t, "<h1>kept</h1>\n")
	if err := c.addProject("kept", kept); err != nil {
		t.Fatal(err)
	}
	if err := e.srv.Close(); err != nil {
		t.Fatal(err)
	}

	// The daemon's start: New, LoadProjects, Reconcile, Serve.
	sup := supervisor.New(e.cfg)
	if shadowed, err := sup.Projects().Load(); err != nil || len(shadowed) != 0 {
		t.Fatalf("LoadProjects = %v, %v; want nothing shadowed", shadowed, err)
	}
	if _, err := sup.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	srv, err := api.Serve(ctx, systemBus(t), sup, api.Rooms{}, access.Policy{}, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	c = newClient(t)
	want := []sandboxd1.ProjectEntry{{Name: "kept", Location: kept, Origin: "added"}, {Name: "web", Location: e.project, Origin: "config"}}
	if got := c.listProjects(); !slices.Equal(got, want) {
		t.Fatalf("ListProjects after the restart = %+v; want %+v", got, want)
	}
	id, path, err := c.create("kept", nil)
	if err != nil {
		t.Fatalf("CreateSandbox(kept) after the restart: %v", err)
	}
	files, err := c.prop(path, "Path")
	if err != nil {
		t.Fatal(err)
	}
	if data, err := os.ReadFile(filepath.Join(files.(string), "index.html")); err != nil || string(data) != "<h1>kept</h1>\n" {
		t.Fatalf("index.html in the sandbox of kept: %q, %v", data, err)
	}
	if err := c.destroy(id); err != nil {
		t.Fatal(err)
	}

	// sandboxd.toml now has a project "kept" of its own: it wins, and the
	// added one is reported for the daemon's warning.
	elsewhere := subvolume(t, "elsewhere\n")
	cfg := e.cfg
	cfg.Projects = map[string]string{"web": e.project, "kept": elsewhere}
	sup = supervisor.New(cfg)
	shadowed, err := sup.Projects().Load()
	if err != nil || len(shadowed) != 1 || shadowed[0].Name != "kept" || shadowed[0].Location != kept {
		t.Fatalf("LoadProjects with sandboxd.toml's kept = %+v, %v; want the added kept reported", shadowed, err)
	}
	if got := sup.Projects().List(); len(got) != 2 || !reflect.DeepEqual(got[0], supervisor.Project{Name: "kept", Location: elsewhere, Origin: supervisor.OriginConfig}) {
		t.Fatalf("projects = %+v; want sandboxd.toml's kept", got)
	}
}
