package integration

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/sandboxd1"
	"github.com/sandboxd/sandboxd/tests/testbed"
)

// The warm pools (issue 34): a create like the owner's last one claims a
// ready sandbox; the pool is refilled; a write to the project is never
// missed; a kill -9 leaves nothing; pools count against the bounds.

// webPool is root's pool of project web (poolOf).
func webPool(t *testing.T) sandboxd1.Pool { return poolOf(t, "web") }

// poolOf is root's pool of project as ListPools shows it (zero: none).
func poolOf(t *testing.T, project string) sandboxd1.Pool {
	t.Helper()
	out := testbed.MustRun(t, "busctl", "--json=short", "call", "org.sandboxd1", "/org/sandboxd1", "org.sandboxd1.Manager", "ListPools")
	var reply struct{ Data []string }
	if err := json.Unmarshal([]byte(out), &reply); err != nil || len(reply.Data) != 1 {
		t.Fatalf("ListPools answered %q: %v", out, err)
	}
	var pools []sandboxd1.Pool
	if err := json.Unmarshal([]byte(reply.Data[0]), &pools); err != nil {
		t.Fatalf("ListPools' JSON %q: %v", reply.Data[0], err)
	}
	for _, p := range pools {
		if p.Project == project && p.Owner == 0 {
			return p
		}
	}
	return sandboxd1.Pool{}
}

// waitPool waits until root's pool of web satisfies ok (a minute at most:
// a pool is made one sandbox at a time).
func waitPool(t *testing.T, what string, ok func(sandboxd1.Pool) bool) sandboxd1.Pool {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		p := webPool(t)
		if ok(p) {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("the pool never got %s: %+v", what, p)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// sandboxVolumes lists the sandboxes' copies of the project (sb-ID) in the
// pool's root: listed or pooled, each is one sandbox.
func sandboxVolumes(t *testing.T, root string) []string {
	t.Helper()
	vols, _ := volumesAndScopes(t, root)
	return slices.DeleteFunc(vols, func(v string) bool { return !strings.HasPrefix(v, "sb-") })
}

// destroyListed destroys every sandbox the caller sees, so that a test
// counts its own.
func destroyListed(t *testing.T) {
	t.Helper()
	for _, id := range listedIDs(t) {
		testbed.MustRun(t, "busctl", "call", "org.sandboxd1", "/org/sandboxd1", "org.sandboxd1.Manager", "DestroySandbox", "s", strings.Trim(id, `"`))
	}
}

func TestAWarmPoolOfFourIsRefilledAfterClaims(t *testing.T) {
	root := freshPool(t, "[limits]\npool = 4\n")
	if p := webPool(t); p.Size != 0 {
		t.Fatalf("a pool before any create: %+v", p)
	}
	first, _ := create(t) // a full create; the pool starts with it
	p := waitPool(t, "4 ready", func(p sandboxd1.Pool) bool { return p.Ready == 4 })
	if p.Size != 4 || p.Claims != 0 {
		t.Fatalf("the pool after the first create: %+v", p)
	}
	// Pooled sandboxes exist, and nobody sees them until claimed.
	if vols := sandboxVolumes(t, root); len(vols) != 5 {
		t.Fatalf("sandbox volumes with one sandbox and a pool of 4: %v", vols)
	}
	if ids := listedIDs(t); len(ids) != 1 || !strings.Contains(ids[0], first) {
		t.Fatalf("ListSandboxes with a pool of 4 ready: %v; want only %s", ids, first)
	}

	// Four creates like the first claim the four; each is a sandbox of
	// its own, its project's files there, its time to live started.
	before := time.Now()
	var claimed []string
	for range 4 {
		id, object := create(t, "1", "TTLUSec", "t", "3600000000")
		claimed = append(claimed, id)
		if _, err := os.Stat(filepath.Join(property(t, object, "Path"), "index.html")); err != nil {
			t.Fatalf("claimed sandbox %s's copy of the project: %v", id, err)
		}
		out := testbed.MustRun(t, "busctl", "get-property", "org.sandboxd1", object, "org.sandboxd1.Sandbox", "Expires")
		f := strings.Fields(out)
		us, err := strconv.ParseInt(f[len(f)-1], 10, 64)
		if exp := time.UnixMicro(us); err != nil || exp.Before(before.Add(time.Hour-time.Minute)) {
			t.Fatalf("claimed sandbox %s expires %q: want an hour from its claim", id, out)
		}
	}
	p = webPool(t)
	if p.Claims != 4 {
		t.Fatalf("after 4 creates like the first: %+v; want 4 claims", p)
	}
	if ids := listedIDs(t); len(ids) != 5 {
		t.Fatalf("ListSandboxes after 4 claims: %v", ids)
	}
	for _, id := range claimed {
		if out := execIn(t, id, false, "cat index.html"); !strings.Contains(out, "<h1>web</h1>") {
			t.Fatalf("a command in claimed sandbox %s reads %q", id, out)
		}
	}
	// Refilled.
	waitPool(t, "4 ready again", func(p sandboxd1.Pool) bool { return p.Ready == 4 && p.Claims == 4 })
	if vols := sandboxVolumes(t, root); len(vols) != 9 {
		t.Fatalf("sandbox volumes with 5 sandboxes and a pool of 4: %v", vols)
	}
}

func TestAWriteToTheProjectMakesTheNextCreateAFreshOne(t *testing.T) {
	freshPool(t, "[limits]\npool = 2\n")
	tb := install(t)
	create(t)
	waitPool(t, "2 ready", func(p sandboxd1.Pool) bool { return p.Ready == 2 })
	// Untouched, a create claims (so that the check below can fail).
	create(t)
	p := waitPool(t, "a claim and 2 ready", func(p sandboxd1.Pool) bool { return p.Claims == 1 && p.Ready == 2 })

	// A write to the project after the pool's snapshots: the next create
	// must see it, so it is not a claim of either.
	file := filepath.Join(tb.Btrfs.Project, "pool-written.txt")
	if err := os.WriteFile(file, []byte("written after the refill\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(file) })
	_, object := create(t)
	got, err := os.ReadFile(filepath.Join(property(t, object, "Path"), "pool-written.txt"))
	if err != nil || string(got) != "written after the refill\n" {
		t.Fatalf("the create after a write to the project reads %q, %v: want the write", got, err)
	}
	after := webPool(t)
	if after.Claims != p.Claims || after.Stale < 2 {
		t.Fatalf("the pool after a write and a create: %+v (before %+v): want no claim, both ready sandboxes stale", after, p)
	}
	// The pool is made again of the project as written, and claimed.
	waitPool(t, "2 ready after the write", func(p sandboxd1.Pool) bool { return p.Ready == 2 })
	_, object = create(t)
	if _, err := os.Stat(filepath.Join(property(t, object, "Path"), "pool-written.txt")); err != nil {
		t.Fatalf("a claim after the refill: %v", err)
	}
	if got := webPool(t); got.Claims != p.Claims+1 {
		t.Fatalf("the pool after its refill and a create: %+v; want one more claim", got)
	}
}

func TestKill9WithAPoolHalfMadeLeavesNoStrayVolumeOrScope(t *testing.T) {
	root := freshPool(t, "[limits]\npool = 8\n")
	first, _ := create(t)
	// Half made: some ready, not all.
	waitPool(t, "some ready", func(p sandboxd1.Pool) bool { return p.Ready >= 1 && p.Ready < 8 })
	pid := mainPID(t)
	testbed.MustRun(t, "kill", "-9", strconv.Itoa(pid))
	waitActive(t, pid)
	// The daemon back with pools off: what was pooled, ready or half
	// made, is destroyed; the caller's sandbox stays.
	reconfigure(t, "")
	waitNoStray(t, root)
	if ids := listedIDs(t); len(ids) != 1 || !strings.Contains(ids[0], first) {
		t.Fatalf("ListSandboxes after the restart: %v; want %s", ids, first)
	}
}

// freshPool starts a pool test: no sandbox listed, the daemon restarted
// with config, nothing of a previous daemon's pools left; it returns the
// pool's root.
func freshPool(t *testing.T, config string) string {
	t.Helper()
	tb := install(t)
	root := filepath.Join(tb.Btrfs.Mount, "sandboxd")
	destroyListed(t)
	reconfigure(t, config)
	waitNoStray(t, root)
	return root
}

// waitNoStray waits until every sandbox volume and scope is a listed
// sandbox's (what a restarted daemon destroys in the background gone).
func waitNoStray(t *testing.T, root string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		listed := strings.Join(listedIDs(t), " ")
		vols, scopes := volumesAndScopes(t, root)
		var stray []string
		for _, v := range append(vols, scopes...) {
			id := strings.TrimSuffix(v[strings.IndexByte(v, '-')+1:], ".scope")
			if slices.ContainsFunc([]string{"sb-", "base-", "sys-", "sandbox-"}, func(p string) bool { return strings.HasPrefix(v, p) }) && !strings.Contains(listed, id) {
				stray = append(stray, v)
			}
		}
		if len(stray) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("volumes and scopes of no listed sandbox: %v", stray)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestPoolSandboxesCountAgainstTheBounds(t *testing.T) {
	root := freshPool(t, "[limits]\npool = 4\nmax_sandboxes_per_user = 3\n")
	create(t)
	// One sandbox and a pool of 4 within 3: two pooled, and the pool says
	// why it stops there.
	p := waitPool(t, "2 ready and blocked", func(p sandboxd1.Pool) bool { return p.Ready == 2 && p.Blocked != "" })
	if !strings.Contains(p.Blocked, "max_sandboxes_per_user") {
		t.Fatalf("the pool at the bound says %q", p.Blocked)
	}
	if vols := sandboxVolumes(t, root); len(vols) != 3 {
		t.Fatalf("sandbox volumes at a bound of 3: %v", vols)
	}
	out := testbed.MustRun(t, "busctl", "call", "org.sandboxd1", "/org/sandboxd1", "org.sandboxd1.Manager", "GetLimits")
	if f := strings.Fields(out); len(f) < 7 || f[5] != "3" || f[6] != "3" {
		t.Fatalf("GetLimits with a sandbox and 2 pooled: %q; want 3 of 3 sandboxes", out)
	}
	// Creates with other options are no claims: each takes a pooled
	// sandbox's place instead of being refused, until the bound is the
	// caller's own sandboxes; past it, a create is refused, as without a
	// pool.
	for range 2 {
		create(t, "1", "MemoryMax", "t", "536870912")
		if vols := sandboxVolumes(t, root); len(vols) > 3 {
			t.Fatalf("sandbox volumes after a create at the bound: %v", vols)
		}
	}
	refused, err := exec.Command("busctl", "call", "org.sandboxd1", "/org/sandboxd1", "org.sandboxd1.Manager", "CreateSandbox", "sa{sv}", "web", "1", "MemoryMax", "t", "536870912").CombinedOutput()
	if err == nil || !strings.Contains(string(refused), "limit") {
		t.Fatalf("a fourth create at a bound of 3 answered %q, %v: want refused", refused, err)
	}
	if ids := listedIDs(t); len(ids) != 3 {
		t.Fatalf("ListSandboxes at the bound: %v", ids)
	}
	if vols := sandboxVolumes(t, root); len(vols) != 3 {
		t.Fatalf("sandbox volumes at the bound: %v", vols)
	}
}
