package idmap

import (
	"errors"
	"slices"
	"testing"

	"github.com/sandboxd/sandboxd/runtime/nsinit"

	"github.com/sandboxd/sandboxd/supervisor/state"
)

func TestMapIDsGivesTheWholeBlockAndTheOwnersHighIDs(t *testing.T) {
	const base = 0x80000
	m := mapIDs(base, 1001, []uint32{1001, 27, 5000, 70000, 1001})
	ns := ForInit(m)
	if err := ns.Validate(); err != nil {
		t.Fatalf("the map of a plain owner: %v", err)
	}
	for _, c := range []struct {
		id       uint32
		uid, gid bool
	}{
		{0, true, true}, {33, true, true}, {999, true, true}, {65534, true, true},
		{1001, true, true}, {5000, true, true}, {70000, false, true},
		{1000, true, true}, {1002, true, true}, {4321, true, true}, {65533, true, true},
		{65535, true, false}, {70001, false, false},
	} {
		if ns.HasUID(c.id) != c.uid || ns.HasGID(c.id) != c.gid {
			t.Errorf("id %d inside: uid %v gid %v; want %v %v", c.id, ns.HasUID(c.id), ns.HasGID(c.id), c.uid, c.gid)
		}
	}
	if ns.RootUID() != base || ns.RootGID() != base {
		t.Errorf("root inside is %d:%d on the host; want %d", ns.RootUID(), ns.RootGID(), base)
	}
	// Every id at its own number in the block (a service's: the project's
	// copy shows its files as its own); one too high for it at the top.
	host := func(es []state.IDExtent, inside uint32) uint32 {
		for _, e := range es {
			if inside >= e.Inside && inside < e.Inside+e.Count {
				return e.Host + inside - e.Inside
			}
		}
		return 0
	}
	for _, id := range []uint32{1001, 33, 4321, 65534} {
		if got := host(m.UIDs, id); got != base+id {
			t.Errorf("uid %d is %d on the host; want %d", id, got, base+id)
		}
	}
	if got := host(m.GIDs, 70000); got != base+65535 {
		t.Errorf("gid 70000 is %d on the host; want the block's top, %d", got, base+65535)
	}
	if lo, hi := ns.HostRange(); lo != base || hi >= base+Block {
		t.Errorf("the map uses host ids %d-%d; want within %d-%d", lo, hi, base, base+Block-1)
	}
}

func TestMapIDsOfRootAndOfAHighOwner(t *testing.T) {
	if err := ForInit(mapIDs(0x80000, 0, []uint32{0})).Validate(); err != nil {
		t.Errorf("root's map: %v", err)
	}
	m := ForInit(mapIDs(0x80000, 1<<31, []uint32{1 << 31, 1<<31 + 1, 65535}))
	if err := m.Validate(); err != nil {
		t.Fatalf("a high owner's map: %v", err)
	}
	for _, g := range []uint32{1 << 31, 1<<31 + 1, 65535} {
		if !m.HasGID(g) {
			t.Errorf("gid %d is not mapped", g)
		}
	}
}

func TestAllocateIDsSkipsHeldAndReservedBlocks(t *testing.T) {
	r := Range{First: 0x80000 + 5, Count: 3 * Block}
	reserved := []idSpan{{first: 0x90000 + 7, count: 1}}   // a host user in block 0x90000
	recs := []state.Entry{{IDBase: 0xa0000, HasIDs: true}} // block 0xa0000: held
	// The range starts mid-block: the first whole block is 0x90000,
	// which a host id is in, and 0xa0000 is held; 0xb0000 runs past the
	// range's end.
	if m, err := allocate(recs, reserved, r, 1000); err == nil {
		t.Errorf("allocated %d; want no free block", m.Base)
	} else if full := (*ExhaustedError)(nil); !errors.As(err, &full) {
		t.Errorf("no free block: %v; want an *ExhaustedError (the core's limit reached)", err)
	}
	r.Count = 6 * Block
	m, err := allocate(recs, reserved, r, 1000)
	if err != nil || m.Base != 0xb0000 {
		t.Errorf("allocated %+v, %v; want the block at 0xb0000", m, err)
	}
}

func TestMapIDsOfAnOwnerWithSeveralHighIDs(t *testing.T) {
	const base = 0x80000
	m := mapIDs(base, 70000, []uint32{80000, 65535, 70000})
	ns := ForInit(m)
	if err := ns.Validate(); err != nil {
		t.Fatalf("the map: %v", err)
	}
	// 65535 keeps its own place; 70000 and 80000 take the next ones
	// down, past nobody's.
	want := map[uint32]uint32{0: base, 65531: base + 65531, 65534: base + 65534, 65535: base + 65535, 70000: base + 65533, 80000: base + 65532}
	for id, h := range want {
		if got, ok := hostOf(ns.GIDs, id); !ok || got != h {
			t.Errorf("gid %d is %d (%v) on the host; want %d", id, got, ok, h)
		}
	}
	if ns.HasGID(65532) || ns.HasGID(65533) {
		t.Errorf("gids 65532 and 65533 are mapped, though their places went to 70000 and 80000")
	}
	if got, ok := hostOf(ns.UIDs, 70000); !ok || got != base+65535 {
		t.Errorf("uid 70000 is %d (%v) on the host; want %d", got, ok, base+65535)
	}
}

func TestShownIDsAreRootNobodyAndTheOwner(t *testing.T) {
	for _, owner := range []uint32{1001, 998, 70000} { // a user, a system user, a high one
		rec := state.Record{Owner: owner, IDs: mapIDs(0x80000, owner, []uint32{owner})}
		shown, full := Shown(rec), ForInit(rec.IDs)
		if err := shown.Validate(); err != nil {
			t.Fatalf("owner %d: the shown map: %v", owner, err)
		}
		for _, c := range []struct {
			id   uint32
			want bool
		}{{0, true}, {owner, true}, {65534, true}, {33, false}, {1, false}, {999 + 1000 - owner%1000, false}, {4321, false}} {
			if shown.HasUID(c.id) != c.want {
				t.Errorf("owner %d: uid %d shown: %v; want %v", owner, c.id, shown.HasUID(c.id), c.want)
			}
			if !full.HasUID(c.id) && c.id != owner {
				t.Errorf("owner %d: uid %d is not in the sandbox's map", owner, c.id)
			}
			if c.want {
				h1, _ := hostOf(shown.UIDs, c.id)
				h2, ok := hostOf(full.UIDs, c.id)
				if !ok || h1 != h2 {
					t.Errorf("owner %d: uid %d is shown as host %d, the sandbox's map has %d (%v)", owner, c.id, h1, h2, ok)
				}
			}
		}
	}
}

func TestExecIdentityRefusesAnUnmappedUserAndDropsUnmappedGroups(t *testing.T) {
	rec := state.Record{ID: "sb", Owner: 1001, IDs: mapIDs(0x80000, 1001, []uint32{1001, 70000})}
	req := nsinit.Request{UID: 1001, GID: 80000, Groups: []uint32{27, 70000, 80001}}
	if err := ExecIdentity(rec, &req); err != nil {
		t.Fatalf("the owner's command: %v", err)
	}
	if req.GID != nobodyID || !slices.Equal(req.Groups, []uint32{27, 70000}) {
		t.Errorf("gid %d, groups %v; want nobody's and the mapped ones (27, 70000)", req.GID, req.Groups)
	}
	if err := ExecIdentity(rec, &nsinit.Request{UID: 70001}); err == nil {
		t.Error("uid 70001, which has no id inside, was let run")
	}
	none := nsinit.Request{UID: 70001, GID: 80000}
	if err := ExecIdentity(state.Record{Owner: 1001}, &none); err != nil || none.GID != 80000 {
		t.Errorf("a sandbox without a user namespace: %v, gid %d; want the request as it is", err, none.GID)
	}
}
