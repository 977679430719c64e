package integration

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/tests/testbed"
)

// cpuTicks is the CPU time process pid used so far, in clock ticks
// (user and system, /proc/PID/stat).
func cpuTicks(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndex(s, ")")+2:])
	user, err1 := strconv.ParseInt(f[11], 10, 64)
	sys, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		t.Fatalf("/proc/%d/stat: %q", pid, s)
	}
	return user + sys
}

// tickMs is a clock tick in milliseconds (USER_HZ, 100 on Linux).
const tickMs = 10

// Review of GetLimits: each call read two slices from systemd, four
// calls that systemd answers with every property of the unit, and it is
// a light call, which any member may make without end (256 connections,
// 128 calls under way on each). A member's 1,024 GetLimits (busctl, 16
// at a time) cost systemd (PID 1, which every create and destroy waits
// on) 1.5 to 1.6 s of CPU, and a flood of them scales on. Now a slice's
// usage is read at most once a second (limits.SliceUsageTTL): the
// same calls cost systemd 10 to 20 ms. The control: every call is
// answered.
func TestHostileGetLimitsFloodCostsSystemdLittle(t *testing.T) {
	install(t)
	regularMember(t, rootAgent)
	okAs(t, rootAgent, "limits") // the member's first reading, and the control
	const calls = 1024
	flood := fmt.Sprintf(`seq %d | xargs -P 16 -n 64 sh -c 'for i; do busctl --system call org.sandboxd1 /org/sandboxd1 org.sandboxd1.Manager GetLimits; done' sh | grep -c '^(t'`, calls)

	daemon, err := strconv.Atoi(strings.TrimSpace(testbed.MustRun(t, "systemctl", "show", "-P", "MainPID", "sandboxd.service")))
	if err != nil {
		t.Fatal(err)
	}
	start, before, daemonBefore := time.Now(), cpuTicks(t, 1), cpuTicks(t, daemon) // 1: the testbed's systemd
	out := testbed.MustRun(t, "setpriv", "--reuid="+rootAgent, "--regid="+rootAgent, "--init-groups", "sh", "-c", flood)
	wall, used, daemonUsed := time.Since(start), (cpuTicks(t, 1)-before)*tickMs, (cpuTicks(t, daemon)-daemonBefore)*tickMs
	if n, err := strconv.Atoi(strings.TrimSpace(out)); err != nil || n != calls {
		t.Fatalf("the control: %q of %d GetLimits answered", out, calls)
	}
	t.Logf("%d GetLimits of a member's in %v: systemd used %d ms of CPU, the daemon %d ms", calls, wall.Round(time.Millisecond), used, daemonUsed)
	// A reading of both slices is under 2 ms of systemd's time: one a
	// second, and ten times as much for what else systemd does.
	if bound := 20 * (int64(wall/time.Second) + 1); used > bound {
		t.Errorf("%d GetLimits in %v cost systemd %d ms of CPU; want at most %d (a reading a second)", calls, wall, used, bound)
	}
}
