package supervisor_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"github.com/sandboxd/sandboxd/supervisor/supervisortest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/supervisor"
	"github.com/sandboxd/sandboxd/supervisor/audit"
	"github.com/sandboxd/sandboxd/units"
)

// withPolicy is a supervisor of e's parts with a policy and an audit log.
func withPolicy(t *testing.T, e *env, p supervisor.Policy) (*supervisor.Supervisor, string) {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), "audit.log")
	log, err := audit.Open(logPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { log.Close() })
	cfg := e.cfg
	cfg.Policy = p
	cfg.Audit = log
	return supervisor.New(cfg), logPath
}

// createAs creates as owner, an admin: these tests are of the caps, not
// of who may use the project.
func createAs(t *testing.T, sup *supervisor.Supervisor, owner uint32, limits units.Limits) (supervisor.Sandbox, error) {
	t.Helper()
	return sup.Create(supervisor.WithIdentity(ctx, supervisor.Identity{UID: owner, Admin: true}), supervisor.CreateOptions{Project: "web", Owner: owner, Limits: limits})
}

func TestCapsPerHostAndPerUser(t *testing.T) {
	e := newEnv(t)
	sup, _ := withPolicy(t, e, supervisor.Policy{MaxSandboxes: 3, MaxPerOwner: 2})
	for range 2 {
		if _, err := createAs(t, sup, 1000, units.Limits{}); err != nil {
			t.Fatal(err)
		}
	}
	_, err := createAs(t, sup, 1000, units.Limits{})
	if !errors.Is(err, supervisor.ErrLimitReached) || !strings.Contains(err.Error(), "uid 1000") || !strings.Contains(err.Error(), "max_sandboxes_per_user") {
		t.Fatalf("a third sandbox for uid 1000: %v; want the per-user limit named", err)
	}
	if _, err := createAs(t, sup, 1001, units.Limits{}); err != nil {
		t.Fatalf("another user's first sandbox: %v", err)
	}
	_, err = createAs(t, sup, 1002, units.Limits{})
	if !errors.Is(err, supervisor.ErrLimitReached) || !strings.Contains(err.Error(), "limits.max_sandboxes") {
		t.Fatalf("a fourth sandbox on the host: %v; want the host limit named", err)
	}
	if vols := supervisortest.Volumes(t, e.fs); len(vols) != 9 {
		t.Fatalf("refused creates left volumes: %v; want the 3 sandboxes' 9 (base, copy, system layer)", vols)
	}
}

func TestConcurrentCreatesCannotPassTheCap(t *testing.T) {
	e := newEnv(t)
	sup, _ := withPolicy(t, e, supervisor.Policy{MaxSandboxes: 3})
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok, refused := 0, 0
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := createAs(t, sup, uint32(2000+i), units.Limits{})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				ok++
			case errors.Is(err, supervisor.ErrLimitReached):
				refused++
			default:
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if ok != 3 || refused != 5 {
		t.Fatalf("8 concurrent creates under a cap of 3: %d made, %d refused", ok, refused)
	}
}

func TestDestroyOldestMakesRoom(t *testing.T) {
	e := newEnv(t)
	sup, logPath := withPolicy(t, e, supervisor.Policy{MaxPerOwner: 2, DestroyOldest: true})
	var ids []string
	for range 3 {
		sb, err := createAs(t, sup, 1000, units.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, sb.ID)
		time.Sleep(10 * time.Millisecond) // distinct creation times
	}
	if _, err := sup.Get(ctx, ids[0]); !errors.Is(err, supervisor.ErrNotFound) {
		t.Fatalf("the oldest sandbox after a create beyond the limit: %v; want it destroyed", err)
	}
	for _, id := range ids[1:] {
		if _, err := sup.Get(ctx, id); err != nil {
			t.Fatalf("sandbox %s: %v", id, err)
		}
	}
	if !hasEntry(t, logPath, "evict", ids[0]) {
		t.Fatalf("the audit log has no evict of %s", ids[0])
	}
}

func TestMemoryCap(t *testing.T) {
	e := newEnv(t)
	sup, _ := withPolicy(t, e, supervisor.Policy{MaxMemory: 1 << 30, DefaultMemoryMax: 2 << 30})
	// A create that sets none gets the derived default MemoryMax (up to
	// 4 GiB), which counts against the cap like any other.
	_, err := createAs(t, sup, 1000, units.Limits{})
	if !errors.Is(err, supervisor.ErrLimitReached) || !strings.Contains(err.Error(), "limits.max_memory") || !strings.Contains(err.Error(), "--memory") {
		t.Fatalf("a create whose default MemoryMax is over a 1 GiB cap: %v; want refused as over limits.max_memory, saying to ask for less", err)
	}
	if _, err := createAs(t, sup, 1000, units.Limits{MemoryMax: new(uint64(600 << 20))}); err != nil {
		t.Fatal(err)
	}
	_, err = createAs(t, sup, 1001, units.Limits{MemoryMax: new(uint64(600 << 20))})
	if !errors.Is(err, supervisor.ErrLimitReached) || !strings.Contains(err.Error(), "limits.max_memory") {
		t.Fatalf("a create that would promise 1200 MiB of 1024: %v", err)
	}
	if _, err := createAs(t, sup, 1001, units.Limits{MemoryMax: new(uint64(400 << 20))}); err != nil {
		t.Fatalf("a create that fits: %v", err)
	}
}

func TestTimeToLive(t *testing.T) {
	e := newEnv(t)
	sup, logPath := withPolicy(t, e, supervisor.Policy{DefaultTTL: time.Hour, MaxTTL: 2 * time.Hour})
	_, err := sup.Create(ctx, supervisor.CreateOptions{Project: "web", TTL: 3 * time.Hour})
	if !errors.Is(err, supervisor.ErrInvalid) || !strings.Contains(err.Error(), "maximum") {
		t.Fatalf("a create with a TTL over the maximum: %v", err)
	}
	short, err := createAs(t, sup, 1000, units.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if got := short.Expires.Sub(short.Created); got != time.Hour {
		t.Fatalf("default TTL gave %v; want 1h", got)
	}
	long, err := sup.Create(ctx, supervisor.CreateOptions{Project: "web", TTL: 2 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	gone, err := sup.Expire(ctx, time.Now().Add(90*time.Minute))
	if err != nil || len(gone) != 1 || gone[0] != short.ID {
		t.Fatalf("Expire at +90m = %v, %v; want only %s", gone, err, short.ID)
	}
	if _, err := os.Stat(short.Path); !os.IsNotExist(err) {
		t.Fatalf("an expired sandbox's files: %v; want them gone", err)
	}
	if _, err := sup.Get(ctx, long.ID); err != nil {
		t.Fatalf("the sandbox with time left: %v", err)
	}
	if !hasEntry(t, logPath, "expire", short.ID) {
		t.Fatalf("the audit log has no expire of %s", short.ID)
	}
}

// hasEntry says whether the audit log records action on sandbox id: by the
// daemon itself for expire and evict... and by the caller for create.
func hasEntry(t *testing.T, path, action, id string) bool {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var e audit.Entry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("audit line %q: %v", sc.Text(), err)
		}
		if e.Action == action && e.Sandbox == id && e.Result == "ok" {
			if action == "create" && (e.CallerUID == nil || *e.CallerUID != 1000) {
				t.Fatalf("create of %s recorded with caller %v; want 1000", id, e.CallerUID)
			}
			return true
		}
	}
	return false
}

func TestTheAuditLogNamesTheCaller(t *testing.T) {
	e := newEnv(t)
	sup, logPath := withPolicy(t, e, supervisor.Policy{})
	sb, err := createAs(t, sup, 1000, units.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if !hasEntry(t, logPath, "create", sb.ID) {
		t.Fatalf("no create of %s in the audit log", sb.ID)
	}
	if _, err := sup.Create(supervisor.WithIdentity(ctx, supervisor.Identity{UID: 1000, Admin: true}), supervisor.CreateOptions{Project: "nope"}); err == nil {
		t.Fatal("a create of an unknown project succeeded")
	}
	data, _ := os.ReadFile(logPath)
	if !strings.Contains(string(data), `"result":"error"`) || !strings.Contains(string(data), "nope") {
		t.Fatalf("a refused create is not in the audit log:\n%s", data)
	}
	// The caller's error is marked refused (kept short, budgeted apart
	// from its actions); the create that succeeded is not.
	if strings.Count(string(data), `"refused":true`) != 1 {
		t.Fatalf("want the unknown project's create, alone, marked refused:\n%s", data)
	}
}
