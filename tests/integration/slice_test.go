package integration

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/tests/testbed"
	"github.com/sandboxd/sandboxd/units"
)

// [limits] user_tasks_max bounds all of one user's sandboxes together, in
// the owner's slice: with one sandbox holding 40 sleepers, a second of the
// same owner cannot start 60 more, though its own TasksMax would let it;
// without the bound (the control) it can.
func TestUserLimitsBoundAllOfAUsersSandboxesTogether(t *testing.T) {
	install(t)
	const spawn60 = `i=0; while [ $i -lt 60 ]; do sleep 120 & i=$((i+1)); done; echo started`
	control := sandbox(t)
	if out, errOut, code := ctl(t, "", "exec", control, "--", "sh", "-c", spawn60); code != 0 || !strings.Contains(out, "started") {
		t.Fatalf("60 sleepers in a sandbox with no per-user bound (the control): exit %d: %s%s", code, out, errOut)
	}
	ctl(t, "", "destroy", control)

	// Root's other sandboxes (of other tests) count too: the bound is 80
	// more than what they hold, and goes with the configuration.
	slice := "sandboxd-u0.slice"
	tasks := func() int {
		n, _ := strconv.Atoi(strings.TrimSpace(testbed.MustRun(t, "systemctl", "show", "-p", "TasksCurrent", "--value", slice)))
		return n
	}
	limit := tasks() + 80
	t.Cleanup(func() {
		// Once the configuration is back, the restarted daemon sets the
		// default again (a quarter of the kernel's tasks).
		_, tasks := machineShare(t, 25)
		if got := strings.TrimSpace(testbed.MustRun(t, "systemctl", "show", "-p", "TasksMax", "--value", slice)); got != strconv.FormatUint(tasks, 10) {
			t.Errorf("%s TasksMax = %q once the bound left the configuration; want the default, %d", slice, got, tasks)
		}
	})
	reconfigure(t, fmt.Sprintf("[limits]\nuser_tasks_max = %d\n", limit))
	a, b := sandbox(t), sandbox(t)
	// In two of the owner's buckets (units.ScopeSlice): the bound is the
	// owner's slice's, over all of them.
	for units.ScopeSlice(0, "sandbox-"+a+".scope") == units.ScopeSlice(0, "sandbox-"+b+".scope") {
		b = sandbox(t)
	}
	if got := strings.TrimSpace(testbed.MustRun(t, "systemctl", "show", "-p", "TasksMax", "--value", slice)); got != strconv.Itoa(limit) {
		t.Fatalf("%s TasksMax = %q; want %d", slice, got, limit)
	}
	// Detached: what the command started with setsid outlives it. The
	// shell waits a little before it ends: a child still on its way to
	// setsid is in the command's process group, which ends with it.
	ok(t, "exec", "--detach", a, "--", "sh", "-c", "i=0; while [ $i -lt 40 ]; do setsid sleep 120 </dev/null >/dev/null 2>&1 & i=$((i+1)); done; sleep 1")
	held, err := strconv.Atoi(strings.TrimSpace(testbed.MustRun(t, "systemctl", "show", "-p", "TasksCurrent", "--value", "sandbox-"+a+".scope")))
	if err != nil || held < 40 {
		t.Fatalf("sandbox %s holds %d tasks (%v) after starting 40 sleepers; want them kept", a, held, err)
	}
	out, errOut, _ := ctl(t, "", "exec", b, "--", "sh", "-c", spawn60)
	if strings.Contains(out, "started") && !strings.Contains(out+errOut, "fork") {
		t.Errorf("60 more sleepers started in the same user's second sandbox: %s%s; want the user's bound (%d tasks) to stop them", out, errOut, limit)
	}
	t.Logf("the second sandbox, starting 60 with 40 held: %s%s", out, errOut)
	current, err := strconv.Atoi(strings.TrimSpace(testbed.MustRun(t, "systemctl", "show", "-p", "TasksCurrent", "--value", slice)))
	if err != nil || current > limit {
		t.Errorf("%s holds %d tasks (%v); want at most %d", slice, current, err, limit)
	}
	scope := strings.TrimSpace(testbed.MustRun(t, "systemctl", "show", "-p", "TasksMax", "--value", "sandbox-"+b+".scope"))
	if n, err := strconv.Atoi(scope); err != nil || n <= limit {
		t.Errorf("sandbox %s's own TasksMax is %q; want more than the user's %d, so that the bound shown is the user's", b, scope, limit)
	}
}
