package integration

import (
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/sandboxd1"
	"github.com/sandboxd/sandboxd/tests/testbed"
)

// The warm pools as an attacker (or bad luck) sees them: a create that
// claims a pool's sandbox must get what a fresh create gets.

// pooledID is the id of the one sandbox whose scope is no listed
// sandbox's: the pool's.
func pooledID(t *testing.T, root string) string {
	t.Helper()
	listed := strings.Join(listedIDs(t), " ")
	_, scopes := volumesAndScopes(t, root)
	var pooled []string
	for _, sc := range scopes {
		id := strings.TrimSuffix(strings.TrimPrefix(sc, "sandbox-"), ".scope")
		if !strings.Contains(listed, id) {
			pooled = append(pooled, id)
		}
	}
	if len(pooled) != 1 {
		t.Fatalf("scopes of no listed sandbox: %v; want the pool's one", pooled)
	}
	return pooled[0]
}

// A pool's sandbox whose init ended while it waited (an OOM kill, any
// death) is not handed out: the create gets a running sandbox.
func TestAClaimHandsOutNoPoolSandboxWhoseInitEnded(t *testing.T) {
	root := freshPool(t, "[limits]\npool = 1\n")
	create(t)
	waitPool(t, "1 ready", func(p sandboxd1.Pool) bool { return p.Ready == 1 })
	pooled := pooledID(t, root)
	testbed.MustRun(t, "systemctl", "kill", "--signal=KILL", "sandbox-"+pooled+".scope")
	deadline := time.Now().Add(20 * time.Second)
	for {
		out, _ := exec.Command("systemctl", "is-active", "sandbox-"+pooled+".scope").Output()
		if strings.TrimSpace(string(out)) != "active" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the pool's scope is still active 20 s after its kill")
		}
		time.Sleep(20 * time.Millisecond)
	}
	id, object := create(t)
	if st := property(t, object, "State"); st != "ready" && st != "running" {
		t.Fatalf("a create answered sandbox %s (the pool's was %s) in state %q; want a running one", id, pooled, st)
	}
	if out := execIn(t, id, false, "echo alive"); !strings.Contains(out, "alive") {
		t.Fatalf("a command in the created sandbox says %q", out)
	}
}

// A create asking for a RuntimeMax runs for as long as asked from the
// create: a pool's sandbox's scope, started before, would end sooner.
func TestACreatesRuntimeMaxCountsFromTheCreate(t *testing.T) {
	freshPool(t, "[limits]\npool = 1\n")
	opt := []string{"1", "RuntimeMaxUSec", "t", "600000000"}
	create(t, opt...)
	// Either a sandbox pooled like it, or (such creates not pooled) none.
	waitPool(t, "1 ready, or no pool", func(p sandboxd1.Pool) bool { return p.Size == 0 || p.Ready == 1 })
	time.Sleep(2 * time.Second) // what a pooled sandbox waits, at the least
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		t.Fatal(err)
	}
	began := ts.Nano() / 1000
	id, _ := create(t, opt...)
	out := strings.TrimSpace(testbed.MustRun(t, "systemctl", "show", "-P", "ActiveEnterTimestampMonotonic", "sandbox-"+id+".scope"))
	entered, err := strconv.ParseInt(out, 10, 64)
	if err != nil {
		t.Fatalf("the scope's ActiveEnterTimestampMonotonic: %q", out)
	}
	if entered < began {
		t.Fatalf("sandbox %s's scope started %.1f s before its create: its RuntimeMax of 10 min ends that much sooner", id, float64(began-entered)/1e6)
	}
}

// With idle_freeze, a pool's sandbox waits unfrozen, and a create claims
// it running (not frozen, its idle time from the claim).
func TestAPooledSandboxIsNotFrozenForBeingIdle(t *testing.T) {
	tb := install(t)
	root := filepath.Join(tb.Btrfs.Mount, "sandboxd")
	destroyListed(t)
	reconfigure(t, "[limits]\npool = 1\nidle_freeze = \"2s\"\n")
	waitNoStray(t, root)
	offset := auditLogSize()
	first, _ := create(t)
	waitPool(t, "1 ready", func(p sandboxd1.Pool) bool { return p.Ready == 1 })
	pooled := pooledID(t, root)
	// The first sandbox, older than the pool's, is frozen for being idle;
	// the pool's would be in that pass or the next (the passes are a
	// second apart at this idle_freeze).
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(ok(t, "status", first), "frozen (idle") {
		if time.Now().After(deadline) {
			t.Fatalf("the idle sandbox is not frozen 20s on: %s", ok(t, "status", first))
		}
		time.Sleep(100 * time.Millisecond)
	}
	frozen := func() bool {
		for _, e := range auditSince(t, offset) {
			if e.Action == "freeze-idle" && e.Sandbox == pooled {
				return true
			}
		}
		return false
	}
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end) && !frozen(); {
		time.Sleep(100 * time.Millisecond)
	}
	if frozen() {
		t.Errorf("the pool's sandbox %s was frozen for being idle", pooled)
	}
	id, object := create(t)
	if st := property(t, object, "State"); st != "ready" && st != "running" {
		t.Fatalf("a create answered sandbox %s in state %q; want a running one", id, st)
	}
	if id != pooled || webPool(t).Claims != 1 {
		t.Fatalf("the create after idle_freeze made %s (pool %+v); want the pool's %s claimed", id, webPool(t), pooled)
	}
}

// A project whose only sandboxes are a warm pool's can be removed: no
// caller sees those, nor can destroy them, and the pool refills them; then
// the pool's sandboxes go.
func TestAWarmPoolDoesNotHoldItsProjectsRemovalBack(t *testing.T) {
	root := freshPool(t, "[limits]\npool = 1\n")
	addProject(t, "pooled", map[string]string{"f": "f\n"})
	id := strings.TrimSpace(ok(t, "create", "--quiet", "pooled"))
	deadline := time.Now().Add(time.Minute)
	for poolOf(t, "pooled").Ready != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("the pool of project pooled never got 1 ready: %+v", poolOf(t, "pooled"))
		}
		time.Sleep(20 * time.Millisecond)
	}
	ok(t, "destroy", id)
	if out, err := manager(t, "RemoveProject", "s", "pooled"); err != nil {
		t.Fatalf("removing a project whose only sandboxes are its pool's: %v %s", err, out)
	}
	waitNoStray(t, root)
	if p := poolOf(t, "pooled"); p.Size != 0 {
		t.Fatalf("the pool of a removed project: %+v", p)
	}
}

// A pool's own creates are no caller's: the audit log (and the metrics'
// creates, counted from it) says "create" once per caller's create, the
// pool's as "pool-create".
func TestAPoolsCreatesAreNotCountedAsCallersCreates(t *testing.T) {
	freshPool(t, "[limits]\npool = 2\n")
	offset := auditLogSize()
	create(t)
	waitPool(t, "2 ready", func(p sandboxd1.Pool) bool { return p.Ready == 2 })
	create(t) // a claim
	waitPool(t, "a claim and 2 ready", func(p sandboxd1.Pool) bool { return p.Claims == 1 && p.Ready == 2 })
	creates, pools := 0, 0
	for _, e := range auditSince(t, offset) {
		switch e.Action {
		case "create":
			creates++
		case "pool-create":
			pools++
		}
	}
	if creates != 2 || pools != 3 {
		t.Fatalf("the audit log after 2 creates (one claimed) and a pool of 2 refilled: %d create lines, %d pool-create; want 2 and 3", creates, pools)
	}
}
