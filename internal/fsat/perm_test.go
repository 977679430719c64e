package fsat

import (
	"testing"

	"golang.org/x/sys/unix"
)

func TestPermits(t *testing.T) {
	st := &unix.Stat_t{Uid: 1000, Gid: 100, Mode: unix.S_IFREG | 0o741}
	for _, c := range []struct {
		uid  uint32
		gids []uint32
		want uint32
		ok   bool
	}{
		{1000, nil, PermRead, true},
		{1000, nil, PermRead | PermSearch, true},
		{1000, []uint32{100}, PermRead, true}, // the owner's bits, not the group's
		{2000, []uint32{5, 100}, PermRead, true},
		{2000, []uint32{100}, PermSearch, false},
		{2000, nil, PermRead, false}, // others may search only
		{2000, nil, PermSearch, true},
		{0, nil, PermRead, false}, // no capability here: root is another uid
	} {
		if got := Permits(st, c.uid, c.gids, c.want); got != c.ok {
			t.Errorf("uid %d groups %v want %o on 0741 1000:100: %v; want %v", c.uid, c.gids, c.want, got, c.ok)
		}
	}
}
