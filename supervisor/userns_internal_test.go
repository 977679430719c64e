package supervisor

import (
	"testing"

	"github.com/sandboxd/sandboxd/supervisor/state"
)

func TestMapIDsGivesRootSystemNobodyAndTheOwner(t *testing.T) {
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
		{1001, true, true}, {5000, false, true}, {70000, false, true},
		{1000, false, false}, {1002, false, false}, {4321, false, false}, {65535, false, false},
	} {
		if ns.HasUID(c.id) != c.uid || ns.HasGID(c.id) != c.gid {
			t.Errorf("id %d inside: uid %v gid %v; want %v %v", c.id, ns.HasUID(c.id), ns.HasGID(c.id), c.uid, c.gid)
		}
	}
	if ns.RootUID() != base || ns.RootGID() != base {
		t.Errorf("root inside is %d:%d on the host; want %d", ns.RootUID(), ns.RootGID(), base)
	}
	// An id at its own number in the block; one too high for it at the top.
	host := func(es []state.IDExtent, inside uint32) uint32 {
		for _, e := range es {
			if inside >= e.Inside && inside < e.Inside+e.Count {
				return e.Host + inside - e.Inside
			}
		}
		return 0
	}
	if got := host(m.UIDs, 1001); got != base+1001 {
		t.Errorf("uid 1001 is %d on the host; want %d", got, base+1001)
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
	s := &Supervisor{cfg: Config{UserNS: UserNS{First: 0x80000 + 5, Count: 3 * IDBlock}}}
	reserved := []idSpan{{first: 0x90000 + 7, count: 1}}   // a host user in block 0x90000
	recs := []state.Entry{{IDBase: 0xa0000, HasIDs: true}} // block 0xa0000: held
	// The range starts mid-block: the first whole block is 0x90000,
	// which a host id is in, and 0xa0000 is held; 0xb0000 runs past the
	// range's end.
	if m, err := s.allocate(recs, reserved, 1000); err == nil {
		t.Errorf("allocated %d; want no free block", m.Base)
	}
	s.cfg.UserNS.Count = 6 * IDBlock
	m, err := s.allocate(recs, reserved, 1000)
	if err != nil || m.Base != 0xb0000 {
		t.Errorf("allocated %+v, %v; want the block at 0xb0000", m, err)
	}
}

func TestShownIDsAreRootNobodyAndTheOwner(t *testing.T) {
	for _, owner := range []uint32{1001, 998} { // a user, and a system user
		rec := state.Record{Owner: owner, IDs: mapIDs(0x80000, owner, []uint32{owner})}
		shown, full := shownIDs(rec), nsIDs(rec.IDs)
		if err := shown.Validate(); err != nil {
			t.Fatalf("owner %d: the shown map: %v", owner, err)
		}
		for _, c := range []struct {
			id   uint32
			want bool
		}{{0, true}, {owner, true}, {65534, true}, {33, false}, {1, false}, {999 + 1000 - owner, false}} {
			if shown.HasUID(c.id) != c.want {
				t.Errorf("owner %d: uid %d shown: %v; want %v", owner, c.id, shown.HasUID(c.id), c.want)
			}
			if c.want && !full.HasUID(c.id) {
				t.Errorf("owner %d: uid %d is shown but not in the sandbox's map", owner, c.id)
			}
		}
	}
}
