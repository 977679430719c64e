package adopt

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/units"
)

// A holder's pid taken, between the walk and systemd's answer, by a
// process of another unit: systemd answers for the pid, so the adoption
// stopped and started that unit. The holder ends; the pid is given to
// the next process (ns_last_pid, as a fork loop would bring it round),
// which is put in a running service's cgroup. The walk's holder must not
// be taken for that service's.
func TestServicesOfAHolderWhosePidWasReused(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root: sets the next pid and moves a process into a unit's cgroup")
	}
	ctx := context.Background()
	m, err := units.Connect(ctx)
	if err != nil {
		t.Skipf("no systemd to ask: %v", err)
	}
	victim := fmt.Sprintf("adopt-victim-%d.service", os.Getpid())
	if out, err := exec.Command("systemd-run", "--unit="+victim, "sleep", "600").CombinedOutput(); err != nil {
		t.Fatalf("starting %s: %v: %s", victim, err, out)
	}
	t.Cleanup(func() { _ = exec.Command("systemctl", "stop", victim).Run() })
	cg, err := exec.Command("systemctl", "show", "-P", "ControlGroup", victim).Output()
	if err != nil || strings.TrimSpace(string(cg)) == "" {
		t.Fatalf("the cgroup of %s: %q, %v", victim, cg, err)
	}

	tree := filepath.Join(t.TempDir(), "tree")
	treeWithFile(t, tree)
	holderCmd := exec.Command("sleep", "600")
	holderCmd.Dir = tree
	if err := holderCmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := holderCmd.Process.Pid
	held, err := holders(tree)
	if err != nil || len(held) != 1 || held[0].pid != pid {
		holderCmd.Process.Kill()
		t.Fatalf("the walk found %+v (%v); want pid %d alone", held, err, pid)
	}
	holderCmd.Process.Kill()
	holderCmd.Wait()

	// The pid's next process, started in a later clock tick than the
	// holder (the kernel's start times are in ticks).
	var reuse *exec.Cmd
	for end := time.Now().Add(60 * time.Second); reuse == nil; {
		if time.Now().After(end) {
			t.Fatalf("pid %d was not given to a new process within 60 s", pid)
		}
		if err := os.WriteFile("/proc/sys/kernel/ns_last_pid", []byte(strconv.Itoa(pid-1)), 0); err != nil {
			t.Skipf("cannot set the next pid: %v", err)
		}
		c := exec.Command("sleep", "600")
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		if st, err := startTime(c.Process.Pid); c.Process.Pid == pid && err == nil && st != held[0].started {
			reuse = c
			break
		}
		c.Process.Kill()
		c.Wait()
	}
	t.Cleanup(func() { reuse.Process.Kill(); reuse.Wait() })
	moved := false
	for _, h := range []string{"/sys/fs/cgroup/unified", "/sys/fs/cgroup/systemd", "/sys/fs/cgroup"} {
		procs := filepath.Join(h, strings.TrimSpace(string(cg)), "cgroup.procs")
		if _, err := os.Stat(procs); err != nil {
			continue
		}
		if err := os.WriteFile(procs, []byte(strconv.Itoa(pid)), 0); err != nil {
			t.Fatalf("moving pid %d into %s: %v", pid, procs, err)
		}
		moved = true
	}
	// The attack: systemd now says the holder's pid is the victim's.
	if u, err := m.UnitOfPID(ctx, pid); !moved || err != nil || u.Name != victim || !running(u.ActiveState) {
		t.Fatalf("pid %d, reused, is of %+v (%v), not of the running %s: not the attack", pid, u, err, victim)
	}

	s := New(newFakeHost(t, nil, m), Config{})
	services, err := s.servicesOf(ctx, held)
	for _, u := range services {
		if u.Name == victim {
			t.Fatalf("the walk's holder, pid %d, gone, was taken for %s, which took its pid: an adoption would stop and start it", pid, victim)
		}
	}
	if err == nil || !strings.Contains(err.Error(), "ended while systemd was asked") {
		t.Errorf("servicesOf for a holder whose pid was reused: %v, %v; want it refused as ended", services, err)
	}
}
