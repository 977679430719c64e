package integration

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/tests/testbed"
	"github.com/sandboxd/sandboxd/units"
)

// Issue 28's finding 9: the defaults bounded each sandbox, not the host.
// With a configuration that says nothing of limits, sandboxd.slice now
// holds three quarters of the machine's memory and tasks, each user's
// slice a quarter, and the daemon's own unit a memory and descriptor
// bound.

// machineShare is percent of the machine's memory and of the most tasks
// the kernel allows (the smaller of pid_max and threads-max), as the
// daemon works out [limits]' shares.
func machineShare(t *testing.T, percent uint64) (memory, tasks uint64) {
	t.Helper()
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"/proc/sys/kernel/pid_max", "/proc/sys/kernel/threads-max"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		if tasks == 0 || n < tasks {
			tasks = n
		}
	}
	return uint64(si.Totalram) * uint64(si.Unit) / 100 * percent, tasks / 100 * percent
}

// showUint is a unit's numeric property, as systemctl show gives it.
func showUint(t *testing.T, unit, prop string) uint64 {
	t.Helper()
	v := strings.TrimSpace(testbed.MustRun(t, "systemctl", "show", "-P", prop, unit))
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		t.Fatalf("%s %s = %q; want a number (a bound)", unit, prop, v)
	}
	return n
}

func TestTheDefaultsBoundAllSandboxesAndEachUsers(t *testing.T) {
	const member = "defaults-a"
	uid, gid := groupMember(t, member)
	reconfigure(t, "") // the tests' configuration: no [limits] at all
	memberProject(t, "defaults-bound", uid, gid, map[string]string{"f": "f\n"})
	okAs(t, member, "create", "--quiet", "defaults-bound")

	slice, user := units.SliceRoot, units.OwnerSlice(uid)
	for _, c := range []struct {
		unit    string
		percent uint64
	}{{slice, 75}, {user, 25}} {
		memory, tasks := machineShare(t, c.percent)
		if got := showUint(t, c.unit, "MemoryMax"); got != memory {
			t.Errorf("%s MemoryMax = %d; want %d%% of the machine's memory, %d", c.unit, got, c.percent, memory)
		}
		if got := showUint(t, c.unit, "TasksMax"); got != tasks {
			t.Errorf("%s TasksMax = %d; want %d%% of the kernel's tasks, %d", c.unit, got, c.percent, tasks)
		}
	}
	if got := strings.TrimSpace(testbed.MustRun(t, "systemctl", "show", "-P", "Slice", "sandboxd-u"+strconv.Itoa(int(uid))+".slice")); got != slice {
		t.Errorf("%s is in %q; want %s, whose bound holds it too", user, got, slice)
	}

	// The daemon's own unit, as the package ships it.
	if got := showUint(t, "sandboxd.service", "MemoryMax"); got != 3<<30 {
		t.Errorf("sandboxd.service MemoryMax = %d; want 3G", got)
	}
	if got := showUint(t, "sandboxd.service", "MemoryHigh"); got != 2560<<20 {
		t.Errorf("sandboxd.service MemoryHigh = %d; want 2560M", got)
	}
	limits, err := os.ReadFile(fmt.Sprintf("/proc/%d/limits", mainPID(t)))
	if err != nil {
		t.Fatal(err)
	}
	if m := regexp.MustCompile(`(?m)^Max open files\s+(\d+)\s+(\d+)`).FindStringSubmatch(string(limits)); m == nil || m[1] != "32768" || m[2] != "32768" {
		t.Errorf("the daemon's descriptors: %q; want at most 32768 (its soft limit raised to the unit's hard one)", m)
	}
	t.Logf("the daemon holds %d descriptors", daemonFDs(t))
}

// holdScript is a member's program that holds as many threads as it is
// asked (each a task of its sandbox's, and of its user's), writes how
// many it got to its ready file, and waits to be killed.
const holdScript = `import os, sys, threading
threading.stack_size(65536)
want, ready = int(sys.argv[1]), sys.argv[2]
forever, got = threading.Event(), 0
try:
    for _ in range(want):
        threading.Thread(target=forever.wait, daemon=True).start()
        got += 1
except RuntimeError:
    pass
with open(ready + ".tmp", "w") as f:
    f.write(str(got))
os.rename(ready + ".tmp", ready)
forever.wait()
`

// holdThreads has sandbox sb of member's hold n threads in the background, and
// returns how many it got once it says so.
func holdThreads(t *testing.T, member, sb string, n uint64) uint64 {
	t.Helper()
	// It waits on the holder's word (a minute at most), not a time: a
	// child still on its way to setsid would end with the command.
	script := fmt.Sprintf("setsid python3 hold.py %d held </dev/null >/dev/null 2>&1 & "+
		"i=0; while [ ! -e held ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done; cat held", n)
	out := strings.TrimSpace(okAs(t, member, "exec", "--detach", sb, "--", "sh", "-c", script))
	got, err := strconv.ParseUint(out, 10, 64)
	if err != nil {
		t.Fatalf("sandbox %s holding %d threads said %q; want how many it got", sb, n, out)
	}
	return got
}

// TestHostileMemberCannotPassItsDefaultUserBound: a member of group
// sandboxd, with the default configuration, fills sandboxes with threads
// (within each one's own TasksMax) past its user's default bound, a
// quarter of the kernel's tasks. With the bound lifted (the control, the
// old default) the last sandbox gets all it asks; by default it gets
// what is left of the user's share only. sandboxctl limits shows it.
func TestHostileMemberCannotPassItsDefaultUserBound(t *testing.T) {
	const member = "defaults-b"
	uid, gid := groupMember(t, member)
	reconfigure(t, "[limits]\nuser_tasks_max = 0\n")
	memberProject(t, "defaults-tasks", uid, gid, map[string]string{"hold.py": holdScript})
	_, bound := machineShare(t, 25)
	create := func() string { return strings.TrimSpace(okAs(t, member, "create", "--quiet", "defaults-tasks")) }

	// Holders up to 400 tasks short of the bound, each well within its
	// own TasksMax (the derived 4096 here).
	first := create()
	own := showUint(t, "sandbox-"+first+".scope", "TasksMax")
	per, target := own-150, bound-400
	holders := []string{first}
	held := holdThreads(t, member, first, min(per, target))
	for held < target {
		if len(holders) >= 30 {
			t.Skipf("the user's bound (%d tasks) takes more than 30 sandboxes of %d: max_sandboxes_per_user bounds it first", bound, own)
		}
		sb := create()
		holders = append(holders, sb)
		held += holdThreads(t, member, sb, min(per, target-held))
	}
	const more = 1000
	control := create()
	if got := holdThreads(t, member, control, more); got != more {
		t.Fatalf("with user_tasks_max = 0 (the control) a sandbox beside %d held tasks got %d threads of %d: the test cannot show the bound", held, got, more)
	}
	ok(t, "destroy", control)

	reconfigure(t, "") // the defaults, applied to the running slice
	if got := showUint(t, units.OwnerSlice(uid), "TasksMax"); got != bound {
		t.Fatalf("%s TasksMax = %d after the restart with the defaults; want %d", units.OwnerSlice(uid), got, bound)
	}
	last := create()
	got := holdThreads(t, member, last, more)
	if got >= more || held+got > bound {
		t.Errorf("beside %d held tasks, a new sandbox of the same member got %d threads of %d; want no more than the user's default bound (%d) leaves", held, got, more, bound)
	}
	if current := showUint(t, units.OwnerSlice(uid), "TasksCurrent"); current > bound {
		t.Errorf("%s holds %d tasks; want at most %d", units.OwnerSlice(uid), current, bound)
	}
	t.Logf("held %d in %d sandboxes; the next got %d of %d (bound %d)", held, len(holders), got, more, bound)

	// As the member reads it.
	out := okAs(t, member, "limits")
	t.Logf("sandboxctl limits:\n%s", out)
	row := func(label string) []string {
		m := regexp.MustCompile(`(?m)^` + label + `\s{2,}(\S+(?: \S+)?)\s{2,}(\S+(?: \S+)?)\s{2,}(\S+)\s{2,}(limits\.\S+)$`).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("sandboxctl limits has no row %q:\n%s", label, out)
		}
		return m[1:]
	}
	if r := row("your tasks"); r[1] != strconv.FormatUint(bound, 10) || r[3] != "limits.user_tasks_max" {
		t.Errorf("your tasks: %q; want the bound %d set by limits.user_tasks_max", r, bound)
	} else if used, _ := strconv.ParseUint(r[0], 10, 64); used < held || used > bound {
		t.Errorf("your tasks: used %q; want between the %d held and the bound %d", r[0], held, bound)
	}
	if r := row("your sandboxes"); r[0] != strconv.Itoa(len(holders)+1) || r[1] != "32" {
		t.Errorf("your sandboxes: %q; want %d of 32", r, len(holders)+1)
	}
	memory, _ := machineShare(t, 25)
	if r := row("your memory"); !strings.HasSuffix(r[1], "iB") || r[3] != "limits.user_memory_max" {
		t.Errorf("your memory: %q; want a bound of %d bytes", r, memory)
	}
	_, all := machineShare(t, 75)
	if r := row("all tasks"); r[1] != strconv.FormatUint(all, 10) {
		t.Errorf("all tasks: %q; want the bound %d", r, all)
	}
}

// Issue 28's finding 10: a booted sandbox got the names, owners and modes
// of every directory of the host's /var/log. It now gets those a package
// installed (dpkg's lists, which it reads itself): nginx's, so that the
// host's nginx starts in it, and not one an admin made.
func TestHostileBootedSandboxSeesNoNameOfTheHostsLogDirs(t *testing.T) {
	install(t)
	secret := fmt.Sprintf("/var/log/secretname-%d", time.Now().UnixNano())
	if err := os.Mkdir(secret, 0o750); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(secret) })
	if err := os.Chown(secret, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat("/var/log/nginx"); err != nil {
		t.Fatalf("the host has no /var/log/nginx (tests/install-deps.sh installs nginx-light): %v", err)
	}
	id, _ := bootSandbox(t, "web")
	list := rootSh(t, id, "ls -a /var/log; stat -c '%n %U:%G %a' /var/log/nginx")
	if strings.Contains(list, "secretname") {
		t.Errorf("the booted sandbox's /var/log names the host's %s:\n%s", secret, list)
	}
	if !strings.Contains(list, "/var/log/nginx root:adm 755") {
		t.Errorf("the booted sandbox's /var/log/nginx: %q; want root:adm 755, as its package made it", list)
	}
	rootSh(t, id, "systemctl start nginx")
	if page := rootSh(t, id, "curl -s http://127.0.0.1/"); !strings.Contains(page, "nginx") {
		t.Errorf("nginx in the booted sandbox answered %q; want its welcome page", page)
	}
}
