package supervisor

import (
	"testing"

	"github.com/sandboxd/sandboxd/supervisor/state"
)

func TestMapIDsGivesTheWholeBlockAndTheOwnersHighIDs(t *testing.T) {
	const base = 0x80000
	m := mapIDs(base, 1001, []uint32{1001, 27, 5000, 70000, 1001})
	ns := nsIDs(m)
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
	if lo, hi := ns.HostRange(); lo != base || hi >= base+IDBlock {
		t.Errorf("the map uses host ids %d-%d; want within %d-%d", lo, hi, base, base+IDBlock-1)
	}
}

func TestMapIDsOfRootAndOfAHighOwner(t *testing.T) {
	if err := nsIDs(mapIDs(0x80000, 0, []uint32{0})).Validate(); err != nil {
		t.Errorf("root's map: %v", err)
	}
	m := nsIDs(mapIDs(0x80000, 1<<31, []uint32{1 << 31, 1<<31 + 1, 65535}))
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
	s := &usernsState{cfg: UserNS{First: 0x80000 + 5, Count: 3 * IDBlock}}
	reserved := []idSpan{{first: 0x90000 + 7, count: 1}}   // a host user in block 0x90000
	recs := []state.Entry{{IDBase: 0xa0000, HasIDs: true}} // block 0xa0000: held
	// The range starts mid-block: the first whole block is 0x90000,
	// which a host id is in, and 0xa0000 is held; 0xb0000 runs past the
	// range's end.
	if m, err := s.allocate(recs, reserved, 1000); err == nil {
		t.Errorf("allocated %d; want no free block", m.Base)
	}
	s.cfg.Count = 6 * IDBlock
	m, err := s.allocate(recs, reserved, 1000)
	if err != nil || m.Base != 0xb0000 {
		t.Errorf("allocated %+v, %v; want the block at 0xb0000", m, err)
	}
}

func TestMapIDsOfAnOwnerWithSeveralHighIDs(t *testing.T) {
	const base = 0x80000
	m := mapIDs(base, 70000, []uint32{80000, 65535, 70000})
	ns := nsIDs(m)
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
		shown, full := shownIDs(rec), nsIDs(rec.IDs)
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
