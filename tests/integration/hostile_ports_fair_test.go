package integration

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	portroom "github.com/sandboxd/sandboxd/supervisor/ports"
)

// portGreeters, run in a sandbox with ports, listens on each port of
// 127.0.0.1 and sends one byte on every connection it takes, which it
// keeps open.
const portGreeters = `import selectors, socket, sys
sel, kept = selectors.DefaultSelector(), []
for p in sys.argv[1:]:
    l = socket.socket()
    l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    l.bind(('127.0.0.1', int(p)))
    l.listen(512)
    l.setblocking(False)
    sel.register(l, selectors.EVENT_READ)
open('/tmp/greeters.ready', 'w').close()
while True:
    for key, _ in sel.select():
        try:
            c, _ = key.fileobj.accept()
        except BlockingIOError:
            continue
        c.send(b'x')
        kept.append(c)
`

// TestHostilePortsOwnersAtTheirCapLeaveAnotherItsConnections: the
// connections through exposed ports were capped per owner (256) and in
// all (1024), four owners' caps: four members holding theirs left a
// fifth none, as four members' Trys once held all the heavy calls'
// slots (issue 28, finding 10). The last quarter is now kept for owners
// with fewer than connbound.FairShare: the fourth member gets
// that many, and the fifth its connections.
func TestHostilePortsOwnersAtTheirCapLeaveAnotherItsConnections(t *testing.T) {
	const members, ports = 5, 4
	perPort := portroom.MaxConnsPerOwner / ports // each of the first four asks its cap
	type owner struct {
		name, holder string
		addrs        []string
	}
	var uids, gids []uint32
	for i := range members {
		uid, gid := groupMember(t, fmt.Sprintf("ports-fair-%d", i))
		uids, gids = append(uids, uid), append(gids, gid)
	}
	reconfigure(t, "") // (the daemon reads the group's members as it starts)
	var owners []owner
	for i := range members {
		name, uid, gid := fmt.Sprintf("ports-fair-%d", i), uids[i], gids[i]
		path := memberProject(t, name, uid, gid, map[string]string{"greeters.py": portGreeters, "holder.py": portHolder})
		sb := strings.TrimSpace(okAs(t, name, "create", "--quiet", name))
		var nums []string
		for p := range ports {
			nums = append(nums, strconv.Itoa(9100+p))
		}
		startServers(t, name, sb, "greeters", filepath.Join(path, "greeters.py"), nums...)
		o := owner{name: name, holder: filepath.Join(path, "holder.py")}
		for _, p := range nums {
			o.addrs = append(o.addrs, "unix:"+strings.TrimSpace(okAs(t, name, "port", sb, p)))
		}
		owners = append(owners, o)
	}
	last := owners[members-1]
	// The control: the fifth member's ports serve it.
	if h := holdPorts(t, last.name, last.holder, 1, false, last.addrs); h.served != ports {
		t.Fatalf("the fifth member's %d connections, alone: %d served; the check below would prove nothing", ports, h.served)
	} else {
		h.stop()
	}
	// The first four hold their caps' worth, never closed until the end.
	total := 0
	for i, o := range owners[:members-1] {
		h := holdPorts(t, o.name, o.holder, perPort, false, o.addrs)
		t.Logf("member %d: %d connections asked, %d served, %d refused", i, perPort*ports, h.served, h.refused)
		total += h.served
	}
	h := holdPorts(t, last.name, last.holder, 1, false, last.addrs)
	t.Logf("the fifth member, with %d open through the others' ports: %d of %d served", total, h.served, ports)
	if h.served != ports {
		t.Errorf("four members holding %d connections left a fifth %d of its %d", total, h.served, ports)
	}
	if total > portroom.MaxConnsAll {
		t.Errorf("%d connections served in all; want at most %d", total, portroom.MaxConnsAll)
	}
}
