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
	if got := strings.TrimSpace(testbed.MustRun(t, "systemctl", "show", "-P", "LimitNOFILE", "sandboxd.service")); got != "32768" {
		t.Errorf("sandboxd.service LimitNOFILE = %q; want 32768", got)
	}
	// The process's hard limit is the unit's, or less where the machine
	// gives less (this testbed's systemd was started with 20,000).
	m := regexp.MustCompile(`(?m)^Max open files\s+(\d+)\s+(\d+)`).FindStringSubmatch(string(limits))
	if m == nil {
		t.Fatalf("no descriptor limit in the daemon's /proc/PID/limits:\n%s", limits)
	}
	if hard, _ := strconv.Atoi(m[2]); hard > 32768 || hard < 16384 {
		t.Errorf("the daemon's descriptors: %q; want at most 32768, the unit's bound", m[0])
	}
	t.Logf("the daemon holds %d descriptors", daemonFDs(t))
}

// hogScript is a member's program that takes as much memory as it is
// asked, 64 MiB at a time, each page written, says how much it holds in
// its progress file after each step and in its ready file once it has it
// all, and waits to be killed.
const hogScript = `import os, sys, threading
want, chunk, held = int(sys.argv[1]), 64 << 20, []
def say(name, text):
    with open(name + ".tmp", "w") as f:
        f.write(text)
    os.rename(name + ".tmp", name)
say("pid", str(os.getpid()))
while len(held) * chunk < want:
    held.append(b"x" * chunk)
    say("progress", str(len(held) * chunk))
say("ready", str(len(held) * chunk))
threading.Event().wait()
`

// hog has sandbox sb of member's take n bytes in the background, and
// returns how many it held when it had them all or was killed: the
// command waits on the hog's word or its end (a minute at most), not on
// a time.
func hog(t *testing.T, member, sb string, n uint64) (uint64, bool) {
	t.Helper()
	script := fmt.Sprintf("rm -f progress ready pid; setsid python3 hog.py %d </dev/null >/dev/null 2>&1 & "+
		"i=0; while kill -0 $! 2>/dev/null && [ ! -e ready ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done; "+
		"if [ -e ready ]; then echo ready $(cat ready); else echo killed $(cat progress 2>/dev/null || echo 0); fi", n)
	out := strings.Fields(okAs(t, member, "exec", "--detach", sb, "--", "sh", "-c", script))
	if len(out) != 2 {
		t.Fatalf("sandbox %s taking %d bytes said %q", sb, n, out)
	}
	got, err := strconv.ParseUint(out[1], 10, 64)
	if err != nil {
		t.Fatalf("sandbox %s taking %d bytes said %q", sb, n, out)
	}
	return got, out[0] == "ready"
}

// hogAlive reports whether sandbox sb's hog still holds its memory: the
// bound's OOM kill may take an earlier one, which had all it asked.
func hogAlive(t *testing.T, member, sb string) bool {
	t.Helper()
	return strings.TrimSpace(okAs(t, member, "exec", sb, "--", "sh", "-c", "kill -0 $(cat pid) 2>/dev/null && echo alive || echo gone")) == "alive"
}

// TestHostileMemberCannotPassItsDefaultUserBound: a member of group
// sandboxd, with the default configuration, fills two sandboxes with
// memory, each within its own MemoryMax (the derived 4 GiB at most),
// past its user's default bound, a quarter of the machine's memory.
// With the bound lifted (the control, the old default) both get all
// they ask, bounded by their own MemoryMax; by default the user's slice
// stops them at its bound. sandboxctl limits shows it, as the member
// reads it.
func TestHostileMemberCannotPassItsDefaultUserBound(t *testing.T) {
	const member = "defaults-b"
	uid, gid := groupMember(t, member)
	memberProject(t, "defaults-memory", uid, gid, map[string]string{"hog.py": hogScript})
	bound, _ := machineShare(t, 25)
	create := func() string { return strings.TrimSpace(okAs(t, member, "create", "--quiet", "defaults-memory")) }
	slice := units.OwnerSlice(uid)

	// Each takes 55% of the bound, 256 MiB less than its own MemoryMax
	// at most: together 110%.
	attack := func() (string, string, uint64, uint64, bool, bool) {
		a, b := create(), create()
		own := showUint(t, "sandbox-"+a+".scope", "MemoryMax")
		each := min(bound/20*11, own-256<<20)
		if 2*each <= bound {
			t.Skipf("two sandboxes of MemoryMax %d cannot pass the user's bound of %d", own, bound)
		}
		gotA, fullA := hog(t, member, a, each)
		gotB, fullB := hog(t, member, b, each)
		return a, b, gotA, gotB, fullA && hogAlive(t, member, a), fullB && hogAlive(t, member, b)
	}

	reconfigure(t, "[limits]\nuser_memory_max = 0\n")
	a, b, gotA, gotB, fullA, fullB := attack()
	if !fullA || !fullB {
		t.Fatalf("with user_memory_max = 0 (the control) two sandboxes took %d and %d bytes (all, and kept: %v, %v): the test cannot show the bound", gotA, gotB, fullA, fullB)
	}
	t.Logf("the control: the member's two sandboxes hold %d bytes, over the default bound of %d", gotA+gotB, bound)
	ok(t, "destroy", a)
	ok(t, "destroy", b)

	reconfigure(t, "") // the defaults
	if got := showUint(t, slice, "MemoryMax"); got != bound {
		t.Fatalf("%s MemoryMax = %d with the defaults; want %d", slice, got, bound)
	}
	a, b, gotA, gotB, fullA, fullB = attack()
	t.Logf("by default: the sandboxes took %d (all, and kept: %v) and %d (all, and kept: %v); the bound is %d", gotA, fullA, gotB, fullB, bound)
	if fullA && fullB {
		t.Errorf("a member's two sandboxes took %d bytes together; want its default bound, %d, to stop them", gotA+gotB, bound)
	}
	if current := showUint(t, slice, "MemoryCurrent"); current > bound {
		t.Errorf("%s uses %d bytes; want at most %d", slice, current, bound)
	}

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
	gib := func(n uint64) string { return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30)) }
	if r := row("your memory"); r[1] != gib(bound) || r[3] != "limits.user_memory_max" {
		t.Errorf("your memory: %q; want the bound %s set by limits.user_memory_max", r, gib(bound))
	}
	if r := row("your memory"); !strings.HasSuffix(r[0], "iB") {
		t.Errorf("your memory: used %q; want an amount", r[0])
	}
	if r := row("your sandboxes"); r[0] != "2" || r[1] != "32" {
		t.Errorf("your sandboxes: %q; want 2 of 32", r)
	}
	_, tasks := machineShare(t, 25)
	if r := row("your tasks"); r[1] != strconv.FormatUint(tasks, 10) || r[3] != "limits.user_tasks_max" {
		t.Errorf("your tasks: %q; want the bound %d", r, tasks)
	}
	all, _ := machineShare(t, 75)
	if r := row("all memory"); r[1] != gib(all) || r[3] != "limits.slice_memory_max" {
		t.Errorf("all memory: %q; want the bound %s", r, gib(all))
	}
	// And in the status of each of the member's sandboxes.
	status := okAs(t, member, "status", b)
	if want := "Yours:     memory "; !strings.Contains(status, want) || !strings.Contains(status, " of "+gib(bound)+", tasks ") ||
		!strings.Contains(status, "sandboxes 2 of 32 (sandboxctl limits)") {
		t.Errorf("sandboxctl status as the member:\n%s\nwant a line of its own bounds (memory of %s, sandboxes 2 of 32)", status, gib(bound))
	}
	ok(t, "destroy", a)
	ok(t, "destroy", b)
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
