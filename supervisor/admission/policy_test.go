package admission_test

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/supervisor/admission"
	"github.com/sandboxd/sandboxd/supervisor/state"
	"github.com/sandboxd/sandboxd/units"
)

// entry is a live record of owner's, promised memoryMax (0: none).
func entry(t *testing.T, id string, owner uint32, memoryMax uint64) state.Entry {
	t.Helper()
	var l units.Limits
	if memoryMax > 0 {
		l.MemoryMax = &memoryMax
	}
	b, err := json.Marshal(l)
	if err != nil {
		t.Fatal(err)
	}
	return state.Entry{ID: id, Owner: owner, State: state.Ready, Limits: b}
}

func ids(es []state.Entry) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.ID)
	}
	return out
}

func TestUnitCapsPerHostAndPerOwner(t *testing.T) {
	p := admission.Policy{MaxSandboxes: 3, MaxPerOwner: 2}
	live := []state.Entry{entry(t, "a", 1000, 0), entry(t, "b", 1000, 0)}
	_, err := p.Admit(live, 1000, nil)
	if !errors.Is(err, admission.ErrLimitReached) || !strings.Contains(err.Error(), "uid 1000 has 2 sandboxes") || !strings.Contains(err.Error(), "max_sandboxes_per_user") {
		t.Fatalf("a third sandbox for uid 1000: %v; want the per-user limit named", err)
	}
	if evict, err := p.Admit(live, 1001, nil); err != nil || len(evict) != 0 {
		t.Fatalf("another owner's first sandbox: evict %v, %v; want admitted, nothing evicted", ids(evict), err)
	}
	live = append(live, entry(t, "c", 1001, 0))
	_, err = p.Admit(live, 1002, nil)
	if !errors.Is(err, admission.ErrLimitReached) || !strings.Contains(err.Error(), "3 sandboxes are alive") || !strings.Contains(err.Error(), "limits.max_sandboxes)") {
		t.Fatalf("a fourth sandbox on the host: %v; want the host limit named", err)
	}
	if _, err := (admission.Policy{}).Admit(live, 1000, nil); err != nil {
		t.Fatalf("no caps: %v", err)
	}
}

func TestUnitDestroyOldestEvictsTheOwnersOldest(t *testing.T) {
	p := admission.Policy{MaxPerOwner: 2, DestroyOldest: true}
	// Oldest first, as the store lists them; another owner's in between.
	live := []state.Entry{entry(t, "a", 1000, 0), entry(t, "x", 1001, 0), entry(t, "b", 1000, 0), entry(t, "c", 1000, 0)}
	evict, err := p.Admit(live, 1000, nil)
	if err != nil || !slices.Equal(ids(evict), []string{"a", "b"}) {
		t.Fatalf("a create beyond 2 per owner with 3 alive: evict %v, %v; want the owner's 2 oldest, a and b", ids(evict), err)
	}
	if evict, err := p.Admit(live, 1001, nil); err != nil || len(evict) != 0 {
		t.Fatalf("an owner under the cap: evict %v, %v; want nothing", ids(evict), err)
	}
	// The host's cap is not made room for: it refuses.
	p.MaxSandboxes = 4
	if _, err := p.Admit(live, 1000, nil); !errors.Is(err, admission.ErrLimitReached) {
		t.Fatalf("at the host's cap with DestroyOldest: %v; want refused", err)
	}
}

func TestUnitMemoryCap(t *testing.T) {
	p := admission.Policy{MaxMemory: 1 << 30}
	live := []state.Entry{entry(t, "a", 1000, 600<<20), entry(t, "b", 1001, 0)}
	live[1].Limits = nil // a record of no limits promises nothing
	if _, err := p.Admit(live, 1002, nil); !errors.Is(err, admission.ErrInvalid) || !strings.Contains(err.Error(), "MemoryMax is required") {
		t.Fatalf("a create without a MemoryMax under a memory cap: %v; want ErrInvalid", err)
	}
	_, err := p.Admit(live, 1002, new(uint64(600<<20)))
	if !errors.Is(err, admission.ErrLimitReached) || !strings.Contains(err.Error(), "limits.max_memory") || !strings.Contains(err.Error(), "--memory") ||
		!strings.Contains(err.Error(), "to 1258291200, over the host's 1073741824") {
		t.Fatalf("a create that would promise 1200 MiB of 1024: %v; want refused, the sum and the cap named", err)
	}
	if _, err := p.Admit(live, 1002, new(uint64(400<<20))); err != nil {
		t.Fatalf("a create that fits: %v", err)
	}
	// What an eviction frees counts: the owner's oldest gives back 600 MiB.
	p.MaxPerOwner, p.DestroyOldest = 1, true
	evict, err := p.Admit(live, 1000, new(uint64(1<<30)))
	if err != nil || !slices.Equal(ids(evict), []string{"a"}) {
		t.Fatalf("a create of 1 GiB that evicts the owner's 600 MiB: evict %v, %v; want a evicted and admitted", ids(evict), err)
	}
	// Without a memory cap, MemoryMax is nobody's business.
	if _, err := (admission.Policy{}).Admit(live, 1002, nil); err != nil {
		t.Fatal(err)
	}
}

func TestUnitLiveLeavesOutTheDestroying(t *testing.T) {
	recs := []state.Entry{entry(t, "a", 1, 0), entry(t, "b", 1, 0), entry(t, "c", 1, 0)}
	recs[0].State, recs[1].State = state.Destroying, state.Creating
	if got := ids(admission.Live(recs)); !slices.Equal(got, []string{"b", "c"}) {
		t.Fatalf("Live = %v; want b and c (a creating sandbox counts, a destroying one does not)", got)
	}
}

func TestUnitPolicyDefaults(t *testing.T) {
	p := admission.Policy{DefaultTTL: time.Hour, MaxTTL: 2 * time.Hour, DefaultMemoryMax: 2 << 30}
	var r admission.Request
	if err := p.ApplyDefaults(&r); err != nil || r.TTL != time.Hour || r.Limits.MemoryMax == nil || *r.Limits.MemoryMax != 2<<30 {
		t.Fatalf("defaults of an empty request: TTL %v, MemoryMax %v, %v; want 1h and 2GiB", r.TTL, r.Limits.MemoryMax, err)
	}
	r = admission.Request{TTL: 2 * time.Hour, Limits: units.Limits{MemoryMax: new(uint64(1 << 20))}}
	if err := p.ApplyDefaults(&r); err != nil || r.TTL != 2*time.Hour || *r.Limits.MemoryMax != 1<<20 {
		t.Fatalf("a request's own TTL and MemoryMax: %v, %d, %v; want them kept", r.TTL, *r.Limits.MemoryMax, err)
	}
	r = admission.Request{TTL: 3 * time.Hour}
	if err := p.ApplyDefaults(&r); !errors.Is(err, admission.ErrInvalid) || !strings.Contains(err.Error(), "over the host's maximum of 2h0m0s") {
		t.Fatalf("a TTL over the maximum: %v; want ErrInvalid naming the maximum", err)
	}
	// The default TTL is held to the maximum too.
	p.DefaultTTL = 3 * time.Hour
	if err := p.ApplyDefaults(&admission.Request{}); !errors.Is(err, admission.ErrInvalid) {
		t.Fatalf("a default TTL over the maximum: %v; want ErrInvalid", err)
	}
	r = admission.Request{}
	if err := (admission.Policy{}).ApplyDefaults(&r); err != nil || r.TTL != 0 || r.Limits.MemoryMax != nil {
		t.Fatalf("no policy: TTL %v, MemoryMax %v, %v; want none", r.TTL, r.Limits.MemoryMax, err)
	}
}

func pooledEntry(t *testing.T, id string, owner uint32, memoryMax uint64) state.Entry {
	e := entry(t, id, owner, memoryMax)
	e.Pool = true
	return e
}

func TestUnitPooledSandboxesCountAndGiveWay(t *testing.T) {
	p := admission.Policy{MaxSandboxes: 4, MaxPerOwner: 2}
	// One of uid 1000's own and one pooled: a create takes the pooled
	// one's place, not refused.
	live := []state.Entry{entry(t, "a", 1000, 0), pooledEntry(t, "p1", 1000, 0), pooledEntry(t, "q1", 1001, 0)}
	evict, err := p.Admit(live, 1000, nil)
	if err != nil || !slices.Equal(ids(evict), []string{"p1"}) {
		t.Fatalf("a create at the per-user cap with one pooled: evict %v, %v; want p1 evicted", ids(evict), err)
	}
	// Pooled sandboxes never make room for more than the cap: two of
	// the owner's own are the cap, pooled or not.
	if _, err := p.Admit(append(live, entry(t, "b", 1000, 0)), 1000, nil); !errors.Is(err, admission.ErrLimitReached) {
		t.Fatalf("a third create of uid 1000's at a cap of 2: %v; want refused", err)
	}
	// The host's cap: the owner's pooled sandboxes go first, then others'.
	live = []state.Entry{entry(t, "a", 1000, 0), pooledEntry(t, "q1", 1001, 0), pooledEntry(t, "q2", 1001, 0), pooledEntry(t, "p1", 1000, 0)}
	evict, err = p.Admit(live, 1002, nil)
	if err != nil || !slices.Equal(ids(evict), []string{"q1"}) {
		t.Fatalf("a create at the host's cap: evict %v, %v; want one pooled sandbox (q1)", ids(evict), err)
	}
	if evict, err = p.Admit(live, 1000, nil); err != nil || !slices.Equal(ids(evict), []string{"p1"}) {
		t.Fatalf("uid 1000's create at the host's cap: evict %v, %v; want its own pooled p1 first", ids(evict), err)
	}
	// Memory: a pooled sandbox's promise gives way too.
	m := admission.Policy{MaxMemory: 1 << 30}
	live = []state.Entry{entry(t, "a", 1000, 512<<20), pooledEntry(t, "p1", 1000, 512<<20)}
	if evict, err = m.Admit(live, 1001, new(uint64(512<<20))); err != nil || !slices.Equal(ids(evict), []string{"p1"}) {
		t.Fatalf("a create of 512 MiB with 1 GiB promised, half pooled: evict %v, %v; want p1", ids(evict), err)
	}
}

func TestUnitAPoolsCreateMakesNoRoom(t *testing.T) {
	p := admission.Policy{MaxSandboxes: 4, MaxPerOwner: 2, DestroyOldest: true}
	live := []state.Entry{entry(t, "a", 1000, 0), pooledEntry(t, "p1", 1000, 0)}
	if err := p.AdmitPooled(live, 1000, nil); !errors.Is(err, admission.ErrLimitReached) || !strings.Contains(err.Error(), "max_sandboxes_per_user") {
		t.Fatalf("a pool's create at the per-user cap (DestroyOldest): %v; want refused", err)
	}
	if err := p.AdmitPooled(live[:1], 1000, nil); err != nil {
		t.Fatalf("a pool's create under the caps: %v", err)
	}
	if err := (admission.Policy{MaxMemory: 1 << 30}).AdmitPooled([]state.Entry{entry(t, "a", 1, 1<<30)}, 2, new(uint64(1))); !errors.Is(err, admission.ErrLimitReached) {
		t.Fatalf("a pool's create over the memory cap: %v", err)
	}
}
