package api_test

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/sandboxd/sandboxd/sandboxd1"
	"github.com/sandboxd/sandboxd/supervisor"
	"github.com/sandboxd/sandboxd/supervisor/api"
	"github.com/sandboxd/sandboxd/supervisor/api/access"
	"github.com/sandboxd/sandboxd/supervisor/state"
	"github.com/sandboxd/sandboxd/tests/testbed"
)

func TestCreateServesTheSandboxAndDestroyRemovesIt(t *testing.T) {
	e := newEnv(t, access.Policy{})
	c := newClient(t)
	sigs := c.signals()

	before := time.Now()
	id, path, err := c.create("web", map[string]dbus.Variant{
		"MemoryMax":          dbus.MakeVariant(uint64(256 << 20)),
		"TasksMax":           dbus.MakeVariant(uint64(64)),
		"CPUQuotaPerSecUSec": dbus.MakeVariant(uint64(500_000)),
		"TTLUSec":            dbus.MakeVariant(uint64(time.Hour / time.Microsecond)),
		"Profile":            dbus.MakeVariant("default"),
	})
	if err != nil {
		t.Fatal(err)
	}
	if !sandboxd1.ValidID(id) || path != sandboxd1.SandboxPath(id) {
		t.Fatalf("CreateSandbox = %q, %q; want an id and its object", id, path)
	}
	if sig := waitSignal(t, sigs, sandboxd1.ManagerInterface+".SandboxNew", id); sig.Path != sandboxd1.ManagerPath || sig.Body[1] != path {
		t.Fatalf("SandboxNew = %v from %s; want (%s, %s) from the manager", sig.Body, sig.Path, id, path)
	}

	props, err := c.props(path)
	if err != nil {
		t.Fatal(err)
	}
	str := func(name string) string { s, _ := props[name].Value().(string); return s }
	if str("Id") != id || str("Project") != "web" || str("State") != "ready" || str("Profile") != "default" ||
		str("Unit") != "sandbox-"+id+".scope" || str("Base") != "base-"+id {
		t.Fatalf("properties of %s: %v", path, props)
	}
	if owner := props["Owner"].Value(); owner != uint32(0) {
		t.Fatalf("Owner = %v; want root's uid 0", owner)
	}
	created := time.UnixMicro(int64(props["Created"].Value().(uint64)))
	if created.Before(before.Truncate(time.Microsecond)) || created.After(time.Now()) {
		t.Fatalf("Created = %v; want between %v and now", created, before)
	}
	if expires := props["Expires"].Value().(uint64); expires != props["Created"].Value().(uint64)+uint64(time.Hour/time.Microsecond) {
		t.Fatalf("Expires = %d; want Created + 1h in µs", expires)
	}
	limits, ok := props["Limits"].Value().(map[string]dbus.Variant)
	// The disk quota the create left unset is the default derived from
	// the pool (a tenth of it): a sandbox always has one.
	quota, _ := limits["DiskQuota"].Value().(uint64)
	if !ok || len(limits) != 4 || limits["MemoryMax"].Value() != uint64(256<<20) ||
		limits["TasksMax"].Value() != uint64(64) || limits["CPUQuotaPerSecUSec"].Value() != uint64(500_000) || quota == 0 {
		t.Fatalf("Limits = %v; want MemoryMax 256M, TasksMax 64, CPUQuotaPerSecUSec 500000 and a DiskQuota", props["Limits"])
	}
	// Path is the sandbox's own copy of the project.
	files := str("Path")
	if data, err := os.ReadFile(filepath.Join(files, "index.html")); err != nil || string(data) != "<h1>web</h1>\n" {
		t.Fatalf("index.html in Path %s: %q, %v", files, data, err)
	}
	if files == e.project {
		t.Fatalf("Path is the project itself")
	}
	if state, err := c.prop(path, "State"); err != nil || state != "ready" {
		t.Fatalf("Get(State) = %v, %v", state, err)
	}

	list, err := c.list()
	if err != nil {
		t.Fatal(err)
	}
	want := sandboxd1.ListEntry{ID: id, Name: "", Project: "web", State: "ready", Owner: 0, Created: props["Created"].Value().(uint64), Object: path}
	if len(list) != 1 || list[0] != want {
		t.Fatalf("ListSandboxes = %+v; want [%+v]", list, want)
	}
	if got, err := c.get(id); err != nil || got != path {
		t.Fatalf("GetSandbox(%s) = %q, %v; want %s", id, got, err, path)
	}

	if err := c.destroy(id); err != nil {
		t.Fatal(err)
	}
	if sig := waitSignal(t, sigs, sandboxd1.ManagerInterface+".SandboxRemoved", id); sig.Body[1] != path {
		t.Fatalf("SandboxRemoved = %v; want (%s, %s)", sig.Body, id, path)
	}
	if _, err := os.Stat(files); !os.IsNotExist(err) {
		t.Fatalf("the sandbox's files after DestroySandbox: %v", err)
	}
	if _, err := c.get(id); errorName(err) != sandboxd1.ErrorNoSuchSandbox {
		t.Fatalf("GetSandbox after DestroySandbox: %v; want NoSuchSandbox", err)
	}
	_, err = c.props(path)
	wantError(t, "GetAll on the destroyed sandbox's object", err, sandboxd1.ErrorNoSuchSandbox, id)
	if list, err := c.list(); err != nil || len(list) != 0 {
		t.Fatalf("ListSandboxes after DestroySandbox = %v, %v; want none", list, err)
	}
	if sbs, _ := e.sup.List(ctx); len(sbs) != 0 {
		t.Fatalf("the supervisor still has %v", sbs)
	}
}

func TestTheSandboxObjectsDestroyMethod(t *testing.T) {
	e := newEnv(t, access.Policy{})
	c := newClient(t)
	sigs := c.signals()
	id, path := c.mustCreate(nil)
	if err := c.conn.Object(sandboxd1.BusName, path).CallWithContext(ctx, sandboxd1.SandboxInterface+".Destroy", 0).Err; err != nil {
		t.Fatal(err)
	}
	waitSignal(t, sigs, sandboxd1.ManagerInterface+".SandboxRemoved", id)
	if _, err := e.sup.Get(ctx, id); !errors.Is(err, supervisor.ErrNotFound) {
		t.Fatalf("the supervisor after Destroy: %v; want ErrNotFound", err)
	}
	err := c.conn.Object(sandboxd1.BusName, path).CallWithContext(ctx, sandboxd1.SandboxInterface+".Destroy", 0).Err
	wantError(t, "Destroy again", err, sandboxd1.ErrorNoSuchSandbox, id)
}

func TestBadInputGetsTheRightErrorName(t *testing.T) {
	e := newEnv(t, access.Policy{})
	c := newClient(t)
	t64 := func(v uint64) dbus.Variant { return dbus.MakeVariant(v) }

	for _, tc := range []struct {
		what    string
		project string
		opts    map[string]dbus.Variant
		name    string
		words   []string
	}{
		{"an unknown project", "nope", nil, sandboxd1.ErrorNoSuchProject, []string{`"nope"`, "unknown project"}},
		{"an unknown option", "web", map[string]dbus.Variant{"MemroyMax": t64(1 << 30)}, sandboxd1.ErrorInvalidArgs, []string{`"MemroyMax"`, "MemoryMax"}},
		{"a string for a number", "web", map[string]dbus.Variant{"MemoryMax": dbus.MakeVariant("1G")}, sandboxd1.ErrorInvalidArgs, []string{"MemoryMax has type s; want t"}},
		{"a signed number", "web", map[string]dbus.Variant{"MemoryMax": dbus.MakeVariant(int64(-1))}, sandboxd1.ErrorInvalidArgs, []string{"MemoryMax has type x; want t"}},
		{"a number for the profile", "web", map[string]dbus.Variant{"Profile": t64(1)}, sandboxd1.ErrorInvalidArgs, []string{"Profile has type t; want s"}},
		{"MemoryMax 0", "web", map[string]dbus.Variant{"MemoryMax": t64(0)}, sandboxd1.ErrorInvalidArgs, []string{"MemoryMax is 0"}},
		{"MemoryHigh above MemoryMax", "web", map[string]dbus.Variant{"MemoryMax": t64(32 << 20), "MemoryHigh": t64(64 << 20)}, sandboxd1.ErrorInvalidArgs, []string{"MemoryHigh", "above MemoryMax"}},
		{"MemoryMax below the floor", "web", map[string]dbus.Variant{"MemoryMax": t64(12)}, sandboxd1.ErrorInvalidArgs, []string{"MemoryMax is 12 bytes", "16MiB"}},
		{"TasksMax 0", "web", map[string]dbus.Variant{"TasksMax": t64(0)}, sandboxd1.ErrorInvalidArgs, []string{"TasksMax is 0"}},
		{"CPUWeight 0", "web", map[string]dbus.Variant{"CPUWeight": t64(0)}, sandboxd1.ErrorInvalidArgs, []string{"CPUWeight is 0"}},
		{"IOWeight above 10000", "web", map[string]dbus.Variant{"IOWeight": t64(10001)}, sandboxd1.ErrorInvalidArgs, []string{"IOWeight is 10001"}},
		{"a CPU quota under 1ms", "web", map[string]dbus.Variant{"CPUQuotaPerSecUSec": t64(999)}, sandboxd1.ErrorInvalidArgs, []string{"CPUQuota"}},
		{"a TTL longer than a duration holds", "web", map[string]dbus.Variant{"TTLUSec": t64(math.MaxUint64)}, sandboxd1.ErrorInvalidArgs, []string{"TTLUSec is 18446744073709551615 µs"}},
		{"a TTL of 0", "web", map[string]dbus.Variant{"TTLUSec": t64(0)}, sandboxd1.ErrorInvalidArgs, []string{"TTLUSec is 0"}},
		{"a runtime longer than a duration holds", "web", map[string]dbus.Variant{"RuntimeMaxUSec": t64(math.MaxInt64)}, sandboxd1.ErrorInvalidArgs, []string{"RuntimeMaxUSec is"}},
		{"a disk quota of 0", "web", map[string]dbus.Variant{"DiskQuota": t64(0)}, sandboxd1.ErrorInvalidArgs, []string{"DiskQuota is 0"}},
		{"a name with a space", "web", map[string]dbus.Variant{"Name": dbus.MakeVariant("a b")}, sandboxd1.ErrorInvalidArgs, []string{`option Name "a b" is not a valid name`, "letters, digits"}},
		{"a name that reads as an id", "web", map[string]dbus.Variant{"Name": dbus.MakeVariant("0123456789ab")}, sandboxd1.ErrorInvalidArgs, []string{`option Name "0123456789ab" is 12 hex digits`}},
		{"an empty name", "web", map[string]dbus.Variant{"Name": dbus.MakeVariant("")}, sandboxd1.ErrorInvalidArgs, []string{"option Name is empty"}},
		{"a number for the name", "web", map[string]dbus.Variant{"Name": t64(1)}, sandboxd1.ErrorInvalidArgs, []string{"Name has type t; want s"}},
		{"every problem at once", "web", map[string]dbus.Variant{"A": t64(1), "TasksMax": dbus.MakeVariant("x"), "TTLUSec": t64(0)}, sandboxd1.ErrorInvalidArgs, []string{`"A"`, "TasksMax has type s", "TTLUSec is 0"}},
	} {
		_, _, err := c.create(tc.project, tc.opts)
		wantError(t, "CreateSandbox with "+tc.what, err, tc.name, tc.words...)
	}

	// A call of the wrong signature never reaches the server's code.
	err := c.manager().CallWithContext(ctx, sandboxd1.ManagerInterface+".CreateSandbox", 0, "web", "MemoryMax").Err
	wantError(t, "CreateSandbox(s, s)", err, sandboxd1.ErrorInvalidArgs)

	for _, id := range []string{"../etc", "a/b", "", strings.Repeat("a", 65), "abc def"} {
		_, err := c.get(id)
		wantError(t, "GetSandbox("+strconv.Quote(id)+")", err, sandboxd1.ErrorInvalidArgs, "not a sandbox id")
		wantError(t, "DestroySandbox("+strconv.Quote(id)+")", c.destroy(id), sandboxd1.ErrorInvalidArgs, "not a sandbox id")
	}
	const unknown = "0123456789ab"
	_, err = c.get(unknown)
	wantError(t, "GetSandbox of an unknown id", err, sandboxd1.ErrorNoSuchSandbox, unknown)
	wantError(t, "DestroySandbox of an unknown id", c.destroy(unknown), sandboxd1.ErrorNoSuchSandbox, unknown)
	_, err = c.props(sandboxd1.SandboxPath(unknown))
	wantError(t, "GetAll on an unknown sandbox's object", err, sandboxd1.ErrorNoSuchSandbox, unknown)
	err = c.conn.Object(sandboxd1.BusName, sandboxd1.SandboxPath(unknown)).CallWithContext(ctx, sandboxd1.SandboxInterface+".Destroy", 0).Err
	wantError(t, "Destroy on an unknown sandbox's object", err, sandboxd1.ErrorNoSuchSandbox, unknown)
	err = c.conn.Object(sandboxd1.BusName, sandboxd1.SandboxPathPrefix+"/a/b").CallWithContext(ctx, sandboxd1.SandboxInterface+".Destroy", 0).Err
	wantError(t, "Destroy below a sandbox's object", err, "org.freedesktop.DBus.Error.UnknownObject", "/org/sandboxd1/sandbox/a/b")

	// Properties are read-only, and named.
	_, path := c.mustCreate(nil)
	obj := c.conn.Object(sandboxd1.BusName, path)
	err = obj.CallWithContext(ctx, "org.freedesktop.DBus.Properties.Set", 0, sandboxd1.SandboxInterface, "State", dbus.MakeVariant("frozen")).Err
	wantError(t, "Set(State)", err, "org.freedesktop.DBus.Error.PropertyReadOnly", "State")
	_, err = c.prop(path, "Colour")
	wantError(t, "Get(Colour)", err, "org.freedesktop.DBus.Error.UnknownProperty", "Colour")
	err = obj.CallWithContext(ctx, "org.freedesktop.DBus.Properties.GetAll", 0, "org.example.Nope").Err
	wantError(t, "GetAll(org.example.Nope)", err, "org.freedesktop.DBus.Error.UnknownInterface", "org.example.Nope")

	// Nothing was made by the refused calls: only the one sandbox exists,
	// and only its three volumes (base, copy, system layer).
	if sbs, _ := e.sup.List(ctx); len(sbs) != 1 {
		t.Fatalf("sandboxes after the refused calls: %v; want only the one made", sbs)
	}
	if vols, _ := e.fs.List(ctx); len(vols) != 3 {
		t.Fatalf("volumes after the refused calls: %v; want the one sandbox's three", vols)
	}
}

func TestASecondServerIsRefusedWithAClearError(t *testing.T) {
	e := newEnv(t, access.Policy{})
	other := systemBus(t)
	_, err := api.Serve(ctx, other, e.sup, e.rooms, access.Policy{}, testLog(t))
	if !errors.Is(err, api.ErrNameTaken) || !strings.Contains(err.Error(), "another sandboxd owns org.sandboxd1") ||
		!strings.Contains(err.Error(), "pid "+strconv.Itoa(os.Getpid())) {
		t.Fatalf("a second Serve: %v; want ErrNameTaken naming the owner's pid %d", err, os.Getpid())
	}
	if _, err := api.Serve(ctx, e.srvConn, e.sup, e.rooms, access.Policy{}, testLog(t)); err == nil || !strings.Contains(err.Error(), "serves it already") {
		t.Fatalf("a second Serve on the serving connection: %v; want a refusal", err)
	}
	// The first still serves, its handlers untouched by the refused ones.
	c := newClient(t)
	if _, err := c.list(); err != nil {
		t.Fatalf("the first server after the refused ones: %v", err)
	}

	// Close releases the name: another may take it at once.
	if err := e.srv.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.list(); err == nil {
		t.Fatalf("ListSandboxes after Close answered")
	}
	next, err := api.Serve(ctx, other, e.sup, e.rooms, access.Policy{}, testLog(t))
	if err != nil {
		t.Fatalf("Serve after the first closed: %v", err)
	}
	defer next.Close()
	if _, err := c.list(); err != nil {
		t.Fatalf("the second server: %v", err)
	}
}

func TestBusctlDrivesTheAPI(t *testing.T) {
	newEnv(t, access.Policy{})
	out := testbed.MustRun(t, "busctl", "call", "org.sandboxd1", "/org/sandboxd1", "org.sandboxd1.Manager", "CreateSandbox", "sa{sv}", "web", "1", "MemoryMax", "t", "268435456")
	t.Logf("$ busctl call org.sandboxd1 /org/sandboxd1 org.sandboxd1.Manager CreateSandbox sa{sv} web 1 MemoryMax t 268435456\n%s", out)
	fields := strings.Fields(out)
	if len(fields) != 3 || fields[0] != "so" {
		t.Fatalf("busctl CreateSandbox printed %q", out)
	}
	id, path := strings.Trim(fields[1], `"`), strings.Trim(fields[2], `"`)
	if dbus.ObjectPath(path) != sandboxd1.SandboxPath(id) {
		t.Fatalf("busctl CreateSandbox: id %s, object %s", id, path)
	}
	for _, argv := range [][]string{
		{"busctl", "get-property", "org.sandboxd1", path, "org.sandboxd1.Sandbox", "State"},
		{"busctl", "get-property", "org.sandboxd1", path, "org.sandboxd1.Sandbox", "Id", "Project", "Owner", "Created", "Expires", "Path", "Unit", "Base", "Profile", "Limits"},
		{"busctl", "call", "org.sandboxd1", "/org/sandboxd1", "org.sandboxd1.Manager", "ListSandboxes"},
		{"busctl", "call", "org.sandboxd1", "/org/sandboxd1", "org.sandboxd1.Manager", "GetSandbox", "s", id},
		{"busctl", "tree", "org.sandboxd1"},
		{"busctl", "introspect", "org.sandboxd1", path},
		{"busctl", "introspect", "org.sandboxd1", "/org/sandboxd1"},
	} {
		t.Logf("$ %s\n%s", strings.Join(argv, " "), testbed.MustRun(t, argv...))
	}
	if got := testbed.MustRun(t, "busctl", "get-property", "org.sandboxd1", path, "org.sandboxd1.Sandbox", "State"); got != "s \"ready\"\n" {
		t.Fatalf("busctl get-property State: %q", got)
	}
	if got := testbed.MustRun(t, "busctl", "tree", "--list", "org.sandboxd1"); !strings.Contains(got, path+"\n") {
		t.Fatalf("busctl tree --list does not show %s:\n%s", path, got)
	}
	// busctl reads the XML: State announces its changes, the rest are
	// constant.
	introspection := testbed.MustRun(t, "busctl", "introspect", "org.sandboxd1", path)
	for prefix, words := range map[string][]string{
		".Destroy ": {"method"},
		".State ":   {"property", `"ready"`, "emits-change"},
		".Id ":      {"property", `"` + id + `"`, "const"},
		".Limits ":  {"property", `3 `, `"MemoryMax" t 268435456`, `"TasksMax" t `, `"DiskQuota" t `, "const"},
	} {
		if line := lineWith(introspection, prefix); !containsAll(line, words...) {
			t.Errorf("busctl introspect %s: line %s is %q; want %q in it", path, prefix, line, words)
		}
	}
	if got := testbed.MustRun(t, "busctl", "call", "org.sandboxd1", "/org/sandboxd1", "org.sandboxd1.Manager", "ListSandboxes"); !strings.HasPrefix(got, `a(ssssuto) 1 "`+id+`" "" "web" "ready" 0 `) {
		t.Fatalf("busctl ListSandboxes: %q", got)
	}
	if got := testbed.MustRun(t, "busctl", "call", "org.sandboxd1", "/org/sandboxd1", "org.sandboxd1.Manager", "FindSandbox", "s", id[:4]); !strings.HasPrefix(got, `(ssssuto) "`+id+`" "" "web" "ready" 0 `) {
		t.Fatalf("busctl FindSandbox of the start of its id: %q", got)
	}
	// busctl shows the daemon's own words for its errors, but only
	// "Access denied" for the bus's (sd-bus replaces the message of
	// org.freedesktop.DBus.Error.AccessDenied; ours keeps its own).
	member := accounts[memberUser]
	for _, tc := range []struct {
		argv []string
		want string
	}{
		{[]string{"busctl", "call", "org.sandboxd1", "/org/sandboxd1", "org.sandboxd1.Manager", "CreateSandbox", "sa{sv}", "web", "1", "MemoryMax", "s", "1G"},
			`Call failed: creating a sandbox of "web": option MemoryMax has type s; want t (bytes)`},
		{[]string{"busctl", "call", "org.sandboxd1", "/org/sandboxd1", "org.sandboxd1.Manager", "CreateSandbox", "sa{sv}", "nope", "0"},
			`Call failed: creating a sandbox of "nope": unknown project`},
		{[]string{"setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
			"busctl", "call", "org.sandboxd1", "/org/sandboxd1", "org.sandboxd1.Manager", "CreateSandbox", "sa{sv}", "web", "0"},
			"Call failed: Access denied"},
		{[]string{"setpriv", "--reuid=" + memberUser, "--regid=" + memberUser, "--init-groups",
			"busctl", "call", "org.sandboxd1", "/org/sandboxd1", "org.sandboxd1.Manager", "CreateSandbox", "sa{sv}", "web", "0"},
			fmt.Sprintf(`Call failed: creating a sandbox of "web": uid %d may not create sandboxes`, member.uid)},
	} {
		out, err := runErr(tc.argv...)
		t.Logf("$ %s\n%s", strings.Join(tc.argv, " "), out)
		if err == nil || !strings.HasPrefix(out, tc.want) {
			t.Errorf("%s: %v, %q; want a failure saying %q", strings.Join(tc.argv, " "), err, out, tc.want)
		}
	}
	out = testbed.MustRun(t, "busctl", "call", "org.sandboxd1", "/org/sandboxd1", "org.sandboxd1.Manager", "DestroySandbox", "s", id)
	if out != "" {
		t.Fatalf("busctl DestroySandbox printed %q", out)
	}
	cmd := []string{"busctl", "get-property", "org.sandboxd1", path, "org.sandboxd1.Sandbox", "State"}
	gone, err := runErr(cmd...)
	t.Logf("$ %s\n%s", strings.Join(cmd, " "), gone)
	if err == nil || !strings.Contains(gone, `no sandbox "`+id+`"`) {
		t.Fatalf("busctl get-property after destroy: %v, %q", err, gone)
	}
}

func TestStateChangesMadeElsewhereAreAnnounced(t *testing.T) {
	e := newEnv(t, access.Policy{})
	c := newClient(t)
	sigs := c.signals()
	if _, err := c.list(); err != nil { // signals go to connections that called
		t.Fatal(err)
	}

	// A sandbox the server did not make: the supervisor's change event
	// announces it, with no call of the server's.
	sb, err := e.sup.Create(ctx, supervisor.CreateOptions{Project: "web", Owner: 0})
	if err != nil {
		t.Fatal(err)
	}
	waitSignal(t, sigs, sandboxd1.ManagerInterface+".SandboxNew", sb.ID)

	// A state change: StateChanged on the manager, PropertiesChanged on
	// the object, and the property reads the new state.
	if _, err := e.store.Update(sb.ID, func(r *state.Record) error { r.State = state.Frozen; return nil }); err != nil {
		t.Fatal(err)
	}
	if err := e.srv.SandboxChanged(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if sig := waitSignal(t, sigs, sandboxd1.ManagerInterface+".StateChanged", sb.ID); sig.Body[1] != "frozen" {
		t.Fatalf("StateChanged = %v; want frozen", sig.Body)
	}
	pc := waitSignal(t, sigs, "org.freedesktop.DBus.Properties.PropertiesChanged", sandboxd1.SandboxInterface)
	if changed := pc.Body[1].(map[string]dbus.Variant); pc.Path != sandboxd1.SandboxPath(sb.ID) || len(changed) != 1 || changed["State"].Value() != "frozen" {
		t.Fatalf("PropertiesChanged from %s: %v; want State frozen from the sandbox's object", pc.Path, pc.Body)
	}
	if st, err := c.prop(sandboxd1.SandboxPath(sb.ID), "State"); err != nil || st != "frozen" {
		t.Fatalf("State after the change: %v, %v", st, err)
	}
	// Told twice, announced once.
	if err := e.srv.SandboxChanged(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.Update(sb.ID, func(r *state.Record) error { r.State = state.Ready; return nil }); err != nil {
		t.Fatal(err)
	}
	if err := e.srv.SandboxChanged(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if sig := waitSignal(t, sigs, sandboxd1.ManagerInterface+".StateChanged", sb.ID); sig.Body[1] != "ready" {
		t.Fatalf("the StateChanged after frozen = %v; want ready (no second frozen)", sig.Body)
	}

	// Gone without the server: SandboxChanged tells it.
	if err := e.sup.Destroy(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if err := e.srv.SandboxChanged(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	waitSignal(t, sigs, sandboxd1.ManagerInterface+".SandboxRemoved", sb.ID)
}

// update rewrites the shipped XML from what is served:
//
//	go test ./supervisor/api -run TestTheServedXMLIsTheShippedXML -update
var update = flag.Bool("update", false, "rewrite contrib/dbus/*.xml from the served XML")

func TestTheServedXMLIsTheShippedXML(t *testing.T) {
	newEnv(t, access.Policy{})
	c := newClient(t)
	id, path := c.mustCreate(nil)
	introspect := func(p dbus.ObjectPath) string {
		t.Helper()
		var xml string
		if err := c.conn.Object(sandboxd1.BusName, p).CallWithContext(ctx, "org.freedesktop.DBus.Introspectable.Introspect", 0).Store(&xml); err != nil {
			t.Fatalf("Introspect %s: %v", p, err)
		}
		return xml
	}
	for _, tc := range []struct {
		path dbus.ObjectPath
		file string
	}{
		{sandboxd1.ManagerPath, "org.sandboxd1.Manager.xml"},
		{path, "org.sandboxd1.Sandbox.xml"},
	} {
		file := filepath.Join("../../contrib/dbus", tc.file)
		got := introspect(tc.path)
		if *update {
			if err := os.WriteFile(file, []byte(got), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		want, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if got != string(want) {
			t.Errorf("Introspect %s differs from contrib/dbus/%s:\n%s", tc.path, tc.file, got)
		}
	}
	// The node above the sandboxes lists them, so that busctl tree finds them.
	if got := introspect(sandboxd1.SandboxPathPrefix); !strings.Contains(got, `<node name="`+id+`"/>`) {
		t.Errorf("Introspect %s does not list %s:\n%s", sandboxd1.SandboxPathPrefix, id, got)
	}
}

// lineWith is the first line of text that starts with prefix.
func lineWith(text, prefix string) string {
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, prefix) {
			return line
		}
	}
	return ""
}

func containsAll(s string, words ...string) bool {
	for _, w := range words {
		if !strings.Contains(s, w) {
			return false
		}
	}
	return true
}

// Sandboxes that exist when the server starts (after the daemon's
// reconcile) are served, and their end is announced like any other.
func TestSandboxesThatExistAtStartAreServed(t *testing.T) {
	e := newEnv(t, access.Policy{})
	sb, err := e.sup.Create(ctx, supervisor.CreateOptions{Project: "web", Owner: 0})
	if err != nil {
		t.Fatal(err)
	}
	e.reserve(t, access.Policy{})
	c := newClient(t)
	sigs := c.signals()
	if st, err := c.prop(sandboxd1.SandboxPath(sb.ID), "State"); err != nil || st != "ready" {
		t.Fatalf("State of the sandbox made before Serve: %v, %v", st, err)
	}
	if err := c.destroy(sb.ID); err != nil {
		t.Fatal(err)
	}
	waitSignal(t, sigs, sandboxd1.ManagerInterface+".SandboxRemoved", sb.ID)
}
