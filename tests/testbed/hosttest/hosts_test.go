package hosttest

import (
	"bufio"
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/tests/testbed"
)

// left is what a host holds on the machine, to check none of it outlives
// its Down.
type left struct {
	name, dir, cgroup, pidNS string
	pid                      int
	images                   []string
}

func (l left) check(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", l.pid)); err == nil {
		t.Errorf("host %s: its systemd (pid %d) is still there", l.name, l.pid)
	}
	if _, err := os.Stat(l.dir); err == nil {
		t.Errorf("host %s: its directory %s is still there", l.name, l.dir)
	}
	if testbed.SubtreeExists(l.cgroup) {
		pids, _ := testbed.SubtreeProcs(l.cgroup)
		t.Errorf("host %s: its cgroup subtree %s is still there (processes %v)", l.name, l.cgroup, pids)
	}
	for _, img := range l.images {
		if out := testbed.MustRun(t, "losetup", "-n", "-O", "NAME", "-j", img); strings.TrimSpace(out) != "" {
			t.Errorf("host %s: loop devices still on %s: %s", l.name, img, out)
		}
	}
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	if strings.Contains(string(mounts), l.dir) {
		t.Errorf("host %s: mounts below %s are left on the machine", l.name, l.dir)
	}
	// No process of its PID namespace is left.
	procs, _ := filepath.Glob("/proc/[0-9]*/ns/pid")
	for _, p := range procs {
		if ns, err := os.Readlink(p); err == nil && ns == l.pidNS {
			t.Errorf("host %s: process %s of its PID namespace is left", l.name, filepath.Base(filepath.Dir(filepath.Dir(p))))
		}
	}
}

// TestTwoHostsAtOnce brings up two testbed hosts at once and proves each
// a host of its own: its systemd runs, a scope's memory limit OOM-kills a
// hog in each, its btrfs pool is its own, its sandboxd (installed from
// outside) serves its own sandboxes over its own bus; stopping sandboxd
// or ending one host leaves the other serving, and nothing of either is
// left after their Down. A single testbed comes up again afterwards.
func TestTwoHostsAtOnce(t *testing.T) {
	if err := testbed.Preflight(); err != nil {
		t.Fatal(err)
	}
	repo, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(repo, "bin", "sandboxd")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%v: run `make build` first", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	base := filepath.Join(testbed.DefaultDir, "hosttest-hosts")
	hosts, err := testbed.UpHosts(ctx, testbed.Config{Dir: base, Binds: []string{repo}, DieWithParent: true, Logf: t.Logf}, "alpha", "beta")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, tb := range hosts {
			_ = tb.Down()
		}
		_ = os.Remove(filepath.Join(base, "hosts"))
		_ = os.Remove(base)
	})
	names := []string{"alpha", "beta"}
	var lefts []left
	for i, tb := range hosts {
		pidNS, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", tb.PID))
		if err != nil {
			t.Fatal(err)
		}
		lefts = append(lefts, left{name: names[i], dir: tb.Dir, cgroup: tb.Cgroup, pidNS: pidNS, pid: tb.PID, images: []string{tb.Btrfs.Image}})
		if tb.ZFS.Pool != "" {
			t.Errorf("host %s has a zfs pool %q; want none", names[i], tb.ZFS.Pool)
		}
	}
	if lefts[0].cgroup == lefts[1].cgroup || lefts[0].pidNS == lefts[1].pidNS {
		t.Fatalf("the hosts share a cgroup subtree or a PID namespace: %+v", lefts)
	}
	for i, tb := range hosts {
		name := names[i]
		out, _ := tb.Run(ctx, "systemctl", "is-system-running")
		if state := strings.TrimSpace(out); state != "running" && state != "degraded" {
			t.Errorf("host %s: is-system-running %q", name, state)
		}
		// Its systemd made its slices in its own subtree, not the machine's.
		if _, err := os.Stat(filepath.Join("/sys/fs/cgroup/systemd", tb.Cgroup, "init.scope")); err != nil {
			t.Errorf("host %s: no init.scope in its subtree: %v", name, err)
		}
		// Real limits: the hog fits under 512M and is killed under 64M.
		hog := "head -c 200M /dev/zero | tail >/dev/null && echo fits"
		out, err = tb.Run(ctx, "systemd-run", "--quiet", "--scope", "-p", "MemoryMax=512M", "sh", "-c", hog)
		if err != nil || strings.TrimSpace(out) != "fits" {
			t.Errorf("host %s: 200M under MemoryMax=512M: %q, %v; want it to fit", name, out, err)
		}
		out, err = tb.Run(ctx, "systemd-run", "--quiet", "--scope", "-p", "MemoryMax=64M", "sh", "-c", hog)
		if err == nil || !strings.Contains(err.Error(), "exit status 137") || strings.Contains(out, "fits") {
			t.Errorf("host %s: 200M under MemoryMax=64M: %q, %v; want it OOM-killed", name, out, err)
		}
		// Its own pool: a file written in one is absent in the other.
		if _, err := tb.Run(ctx, "sh", "-c", "echo "+name+" >"+filepath.Join(tb.Btrfs.Project, "whose")); err != nil {
			t.Fatal(err)
		}
	}
	for i, tb := range hosts {
		out, err := tb.Run(ctx, "cat", filepath.Join(tb.Btrfs.Project, "whose"))
		if err != nil || strings.TrimSpace(out) != names[i] {
			t.Errorf("host %s: its project's file reads %q, %v; want %q (its own pool)", names[i], out, err, names[i])
		}
	}

	// sandboxd in each, a sandbox in each from outside over its bus.
	clients := make([]*client.Client, len(hosts))
	ids := make([]string, len(hosts))
	for i, tb := range hosts {
		if err := tb.InstallServiceOn(ctx, repo, bin, tb.SandboxdConfig("")); err != nil {
			t.Fatalf("host %s: %v", names[i], err)
		}
		c, err := client.ConnectAddress(ctx, tb.BusAddress())
		if err != nil {
			t.Fatalf("host %s: %v", names[i], err)
		}
		t.Cleanup(func() { c.Close() })
		clients[i] = c
		sb, err := c.Create(ctx, "web", client.CreateOptions{Name: "on-" + names[i], MemoryMax: 256 << 20})
		if err != nil {
			t.Fatalf("host %s: creating a sandbox: %v", names[i], err)
		}
		ids[i] = sb.ID()
		stdout, stderr, st, err := sb.Output(ctx, []string{"cat", filepath.Join(tb.Btrfs.Project, "whose")}, client.ExecOptions{})
		if err != nil || st.Code != 0 || strings.TrimSpace(string(stdout)) != names[i] {
			t.Errorf("host %s: its sandbox reads its project's file: %q, %v, %+v (%s); want %q", names[i], stdout, err, st, stderr, names[i])
		}
		// The sandbox's own limit (MemoryMax 256M) holds in a host.
		stdout, stderr, st, err = sb.Output(ctx, []string{"sh", "-c", "head -c 400M /dev/zero | tail >/dev/null && echo fits"}, client.ExecOptions{})
		if err != nil || st.Code != 137 || strings.Contains(string(stdout), "fits") {
			t.Errorf("host %s: 400M in its sandbox of MemoryMax 256M: %q, %v, %+v (%s); want it OOM-killed", names[i], stdout, err, st, stderr)
		}
		// Its scope is in the host's subtree of the machine's hierarchies.
		scope := "sandbox-" + sb.ID() + ".scope"
		found := false
		_ = filepath.WalkDir(filepath.Join("/sys/fs/cgroup/memory", tb.Cgroup), func(path string, d fs.DirEntry, err error) error {
			found = found || err == nil && d.IsDir() && d.Name() == scope
			return nil
		})
		if !found {
			t.Errorf("host %s: no %s in its subtree %s of the memory hierarchy", names[i], scope, tb.Cgroup)
		}
		// sandboxd's own freeze (cgroup.freeze) works in a host.
		if err := sb.Freeze(ctx); err != nil {
			t.Errorf("host %s: freezing its sandbox: %v", names[i], err)
		} else if err := sb.Thaw(ctx); err != nil {
			t.Errorf("host %s: thawing its sandbox: %v", names[i], err)
		}
	}
	listed := func(i int) ([]string, error) {
		list, err := clients[i].List(ctx)
		var got []string
		for _, e := range list {
			got = append(got, e.ID)
		}
		return got, err
	}
	for i := range hosts {
		got, err := listed(i)
		if err != nil || !slices.Equal(got, []string{ids[i]}) {
			t.Errorf("host %s lists %v, %v; want its own sandbox alone, %s", names[i], got, err, ids[i])
		}
	}

	// Stopping sandboxd in alpha leaves beta's serving.
	if _, err := hosts[0].Run(ctx, "systemctl", "stop", "sandboxd.service"); err != nil {
		t.Fatal(err)
	}
	if _, err := clients[0].List(ctx); err == nil {
		t.Errorf("host alpha's sandboxd answers after its stop")
	}
	if got, err := listed(1); err != nil || !slices.Equal(got, []string{ids[1]}) {
		t.Errorf("host beta after alpha's sandboxd stopped: %v, %v; want %s", got, err, ids[1])
	}

	// Down of alpha leaves beta up and serving.
	if err := hosts[0].Down(); err != nil {
		t.Errorf("ending host alpha: %v", err)
	}
	lefts[0].check(t)
	out, _ := hosts[1].Run(ctx, "systemctl", "is-system-running")
	if state := strings.TrimSpace(out); state != "running" && state != "degraded" {
		t.Errorf("host beta after alpha's Down: is-system-running %q", state)
	}
	if got, err := listed(1); err != nil || !slices.Equal(got, []string{ids[1]}) {
		t.Errorf("host beta after alpha's Down lists %v, %v; want %s", got, err, ids[1])
	}
	clients[1].Close()
	if err := hosts[1].Down(); err != nil {
		t.Errorf("ending host beta: %v", err)
	}
	lefts[1].check(t)
	for _, h := range []string{"systemd", "memory", "unified"} {
		if _, err := os.Stat(filepath.Join("/sys/fs/cgroup", h, "sandboxd-testbed")); err == nil {
			t.Errorf("/sys/fs/cgroup/%s/sandboxd-testbed is left after both hosts' Down", h)
		}
	}

	// The lock is free again: a classic testbed comes up, and runs.
	single, err := testbed.Up(ctx, testbed.Config{Dir: base, DieWithParent: true, Logf: t.Logf})
	if err != nil {
		t.Fatalf("a single testbed after the hosts: %v", err)
	}
	defer single.Down()
	if out, err := single.Run(ctx, "systemctl", "is-system-running"); err != nil || strings.TrimSpace(out) != "running" {
		t.Errorf("the single testbed after the hosts: %q, %v", out, err)
	}
	if err := single.Down(); err != nil {
		t.Errorf("ending the single testbed: %v", err)
	}
}

// envHoldHosts makes TestHelperHoldHosts bring hosts up under its value
// (a base directory), print their pids and wait to be killed.
const envHoldHosts = "SANDBOXD_TEST_HOLD_HOSTS"

func TestHelperHoldHosts(t *testing.T) {
	base := os.Getenv(envHoldHosts)
	if base == "" {
		t.Skip("a helper of TestHostsOfAKilledProcessGoAndTheNextUpClearsThem")
	}
	hosts, err := testbed.UpHosts(t.Context(), testbed.Config{Dir: base, DieWithParent: true}, "alpha", "beta")
	if err != nil {
		t.Fatal(err)
	}
	for _, tb := range hosts {
		fmt.Printf("host %d %s %s\n", tb.PID, tb.Cgroup, tb.Btrfs.Image)
	}
	fmt.Println("ready")
	time.Sleep(5 * time.Minute)
}

// TestHostsOfAKilledProcessGoAndTheNextUpClearsThem kills (SIGKILL) a
// process holding two hosts: both die with it, and the next UpHosts
// clears the subtrees and directories they left, and its Down leaves
// nothing.
func TestHostsOfAKilledProcessGoAndTheNextUpClearsThem(t *testing.T) {
	if err := testbed.Preflight(); err != nil {
		t.Fatal(err)
	}
	base := filepath.Join(testbed.DefaultDir, "hosttest-killed")
	t.Cleanup(func() {
		_ = testbed.Stop(context.Background(), base)
		_ = os.RemoveAll(base)
	})
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperHoldHosts$", "-test.v")
	cmd.Env = append(os.Environ(), envHoldHosts+"="+base)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	var lefts []left
	sc := bufio.NewScanner(stdout)
	for sc.Scan() && sc.Text() != "ready" {
		var l left
		if n, _ := fmt.Sscanf(sc.Text(), "host %d %s %s", &l.pid, &l.cgroup, &l.dir); n == 3 {
			l.name, l.images = filepath.Base(l.cgroup), []string{l.dir}
			l.dir = filepath.Join(base, "hosts", l.name)
			l.pidNS, _ = os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", l.pid))
			lefts = append(lefts, l)
		}
	}
	if len(lefts) != 2 {
		t.Fatalf("the helper brought up %d hosts; want 2", len(lefts))
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	for _, l := range lefts {
		deadline := time.Now().Add(15 * time.Second)
		for {
			if _, err := os.Stat(fmt.Sprintf("/proc/%d", l.pid)); err != nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("host %s's systemd (pid %d) outlived its owner's SIGKILL", l.name, l.pid)
			}
			time.Sleep(20 * time.Millisecond)
		}
		if !testbed.SubtreeExists(l.cgroup) {
			t.Logf("host %s's subtree went with it already", l.name)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	hosts, err := testbed.UpHosts(ctx, testbed.Config{Dir: base, DieWithParent: true}, "gamma")
	if err != nil {
		t.Fatalf("hosts after a killed owner's: %v", err)
	}
	for _, l := range lefts {
		if testbed.SubtreeExists(l.cgroup) {
			t.Errorf("host %s's subtree %s is left after the next UpHosts", l.name, l.cgroup)
		}
	}
	gamma := left{name: "gamma", dir: hosts[0].Dir, cgroup: hosts[0].Cgroup, pid: hosts[0].PID, images: []string{hosts[0].Btrfs.Image}}
	gamma.pidNS, _ = os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", gamma.pid))
	if err := hosts[0].Down(); err != nil {
		t.Error(err)
	}
	for _, l := range append(lefts, gamma) {
		l.check(t)
	}
}
