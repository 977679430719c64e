//go:build fleet

package fleet_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/tests/fleet"
	"github.com/sandboxd/sandboxd/tests/testbed"
)

// repo is the repository's root (tests/fleet → ..).
var repo = func() string {
	wd, _ := os.Getwd()
	return filepath.Dir(filepath.Dir(wd))
}()

func TestMain(m *testing.M) {
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "fleet: the fleet test boots two testbed hosts and needs root: sudo make fleet-test")
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// host is one sandboxd host of the fleet: a testbed with its own systemd,
// bus and btrfs pool, sandboxd installed in it as a sysadmin would, and
// its sandboxd-kubelet running beside it, a client of its bus.
type host struct {
	name string
	tb   *testbed.Testbed
	bus  *client.Client
}

const project = "web"

// TestFleet is issue 32's "done when", in order, on one fleet: two hosts
// become nodes; 20 SandboxClaims of a project spread over both and each
// becomes Ready, each a sandbox on the host its pod landed on; kubectl
// exec runs in one; a SandboxWarmPool of 4 keeps 4 ready and a claim takes
// one; with one host's sandboxd stopped its node goes NotReady and new
// claims land on the other; deleting the claims destroys every sandbox on
// both hosts.
func TestFleet(t *testing.T) {
	tools, err := fleet.Tools(repo)
	if err != nil {
		t.Fatal(err)
	}
	for _, bin := range []string{"sandboxd", "sandboxctl", "sandboxd-kubelet"} {
		if _, err := os.Stat(filepath.Join(repo, "bin", bin)); err != nil {
			t.Fatalf("bin/%s is missing: make build first (make fleet-test does)", bin)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)

	hosts := upHosts(ctx, t)
	cp, err := fleet.StartControlPlane(ctx, tools, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cp.Stop)
	for _, h := range hosts {
		startKubelet(ctx, t, cp, h)
	}
	for _, h := range hosts {
		waitNode(ctx, t, cp, h.name, "True")
	}

	apply(ctx, t, cp, template())
	// A claim names a warm pool; one of no replicas makes every claim a
	// cold start, a sandbox made for it.
	apply(ctx, t, cp, warmPool("web-cold", 0))

	// 20 claims, spread over both hosts, each Ready, each a sandbox on the
	// host its pod is bound to.
	var plain time.Duration
	{
		begin := time.Now()
		sb, err := hosts[0].bus.Create(ctx, project, client.CreateOptions{})
		if err != nil {
			t.Fatalf("a plain CreateSandbox on %s: %v", hosts[0].name, err)
		}
		plain = time.Since(begin)
		if err := sb.Destroy(ctx); err != nil {
			t.Fatal(err)
		}
	}
	var claims []string
	created := map[string]time.Time{}
	for i := range 20 {
		name := fmt.Sprintf("claim-%02d", i)
		apply(ctx, t, cp, claim(name, "web-cold"))
		created[name] = time.Now()
		claims = append(claims, name)
	}
	readyAfter := waitClaimsReady(ctx, t, cp, claims, created)
	perNode := checkSandboxesOnTheirHosts(ctx, t, cp, hosts, claims)
	for _, h := range hosts {
		if perNode[h.name] == 0 {
			t.Errorf("no claim's sandbox landed on %s: %v", h.name, perNode)
		}
	}
	// The check of what is left at the end sees these sandboxes now.
	seen := 0
	for _, h := range hosts {
		seen += len(leftovers(ctx, t, h))
	}
	if seen < 20 {
		t.Errorf("the leftovers' check sees %d volumes and scopes while 20 sandboxes run", seen)
	}
	sort.Slice(readyAfter, func(i, j int) bool { return readyAfter[i] < readyAfter[j] })
	t.Logf("20 claims: claim to Ready p50 %s, max %s; a plain CreateSandbox %s; per node %v",
		readyAfter[len(readyAfter)/2].Round(time.Millisecond), readyAfter[len(readyAfter)-1].Round(time.Millisecond),
		plain.Round(time.Millisecond), perNode)

	// kubectl exec runs a command in one: it sees the project's files.
	pod := claimPod(ctx, t, cp, claims[0])
	out, err := cp.Kubectl(ctx, "exec", pod, "--", "cat", "/mnt/testbed-btrfs/project/hello.txt")
	if err != nil || out != "hello from the project\n" {
		t.Fatalf("kubectl exec %s -- cat hello.txt: %q, %v", pod, out, err)
	}
	out, err = cp.Kubectl(ctx, "exec", pod, "--", "sh", "-c", "echo $((6*7)) > /tmp/x && cat /tmp/x; exit 3")
	if err == nil || out != "42\n" || !strings.Contains(err.Error(), "exit code 3") {
		t.Fatalf("kubectl exec with an exit status 3: %q, %v", out, err)
	}

	// kubectl logs is the pod's process's output; kubectl attach follows it.
	if out, err := cp.Kubectl(ctx, "logs", pod, "--limit-bytes=8"); err != nil || out != "started\n" {
		t.Fatalf("kubectl logs %s --limit-bytes=8: %q, %v", pod, out, err)
	}
	attachTicks(ctx, t, cp, pod)

	// A warm pool of 4 keeps 4 ready sandboxes; a claim takes one of them
	// and the pool makes another.
	apply(ctx, t, cp, warmPool("web-warm", 4))
	warm := waitWarmReady(ctx, t, cp, "web-warm", 4)
	apply(ctx, t, cp, claim("claim-warm", "web-warm"))
	claims = append(claims, "claim-warm")
	warmAfter := waitClaimsReady(ctx, t, cp, []string{"claim-warm"}, map[string]time.Time{"claim-warm": time.Now()})
	taken := claimSandbox(ctx, t, cp, "claim-warm")
	if !slices.Contains(warm, taken) {
		t.Errorf("claim-warm got sandbox %s, not one of the pool's ready %v", taken, warm)
	}
	after := waitWarmReady(ctx, t, cp, "web-warm", 4)
	if slices.Contains(after, taken) {
		t.Errorf("the claimed sandbox %s is still counted in the pool: %v", taken, after)
	}
	t.Logf("a claim from the warm pool of 4: Ready %s after it was applied", warmAfter[0].Round(time.Millisecond))

	// One host's sandboxd stops: its node goes NotReady, and new claims
	// land on the other.
	down, up := hosts[1], hosts[0]
	if _, err := down.tb.Run(ctx, "systemctl", "stop", "sandboxd.service"); err != nil {
		t.Fatalf("stopping sandboxd on %s: %v", down.name, err)
	}
	stopped := time.Now()
	waitNode(ctx, t, cp, down.name, "False")
	t.Logf("%s NotReady %s after its sandboxd stopped", down.name, time.Since(stopped).Round(time.Millisecond))
	var late []string
	for i := range 4 {
		name := fmt.Sprintf("claim-late-%d", i)
		apply(ctx, t, cp, claim(name, "web-cold"))
		late = append(late, name)
	}
	waitClaimsReady(ctx, t, cp, late, nil)
	for _, c := range late {
		if node := podNode(ctx, t, cp, claimPod(ctx, t, cp, c)); node != up.name {
			t.Errorf("%s landed on %s while %s's sandboxd was stopped", c, node, down.name)
		}
	}
	claims = append(claims, late...)

	// sandboxd comes back; deleting the claims and the pools destroys
	// every sandbox on both hosts.
	if _, err := down.tb.Run(ctx, "systemctl", "start", "sandboxd.service"); err != nil {
		t.Fatalf("starting sandboxd on %s again: %v", down.name, err)
	}
	waitNode(ctx, t, cp, down.name, "True")
	if _, err := cp.Kubectl(ctx, "delete", "sandboxwarmpool.extensions.agents.x-k8s.io", "--all", "--wait=false"); err != nil {
		t.Fatal(err)
	}
	if _, err := cp.Kubectl(ctx, append([]string{"delete", "sandboxclaim.extensions.agents.x-k8s.io", "--wait=false"}, claims...)...); err != nil {
		t.Fatal(err)
	}
	if err := cp.WaitFor(ctx, "every pod to be gone", 5*time.Minute, func() (bool, error) {
		out, err := cp.Kubectl(ctx, "get", "pods", "-o", "name")
		return err == nil && strings.TrimSpace(out) == "", nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, h := range hosts {
		h := h
		if err := cp.WaitFor(ctx, "no sandbox left on "+h.name, 2*time.Minute, func() (bool, error) {
			list, err := h.bus.List(ctx)
			return err == nil && len(list) == 0, err
		}); err != nil {
			t.Error(err)
		}
		if left := leftovers(ctx, t, h); len(left) > 0 {
			t.Errorf("left on %s after every claim was deleted: %v", h.name, left)
		}
	}
}

// leftovers lists what is left of sandboxes on a host: a volume of one
// in the pool's root (an owner's cache and the projects' bases outlive
// sandboxes, by design), a sandbox scope in any state.
func leftovers(ctx context.Context, t *testing.T, h *host) []string {
	t.Helper()
	out, err := h.tb.Run(ctx, "ls", "-A", filepath.Join(testbed.BtrfsMount, "sandboxd"))
	if err != nil {
		t.Fatalf("listing %s's pool: %v", h.name, err)
	}
	var left []string
	for _, name := range strings.Fields(out) {
		for _, prefix := range []string{"sb-", "sys-", "ck-", "cks-", "diff-", "check-", "pv-", ".tmp-del-"} {
			if strings.HasPrefix(name, prefix) {
				left = append(left, name)
			}
		}
	}
	out, err = h.tb.Run(ctx, "systemctl", "list-units", "--all", "--plain", "--no-legend", "sandbox-*.scope")
	if err != nil {
		t.Fatalf("listing %s's scopes: %v", h.name, err)
	}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			left = append(left, "unit "+f[0])
		}
	}
	return left
}

// upHosts brings up the two hosts, installs sandboxd in each with project
// "web" (a file in it), and connects to each one's bus from here.
func upHosts(ctx context.Context, t *testing.T) []*host {
	t.Helper()
	tbs, err := testbed.UpHosts(ctx, testbed.Config{
		Binds:         []string{repo},
		DieWithParent: true,
		Logf:          t.Logf,
	}, "host-a", "host-b")
	if err != nil {
		t.Fatal(err)
	}
	var hosts []*host
	for i, tb := range tbs {
		h := &host{name: fmt.Sprintf("host-%c", 'a'+i), tb: tb}
		t.Cleanup(func() {
			if h.bus != nil {
				h.bus.Close()
			}
			if err := tb.Down(); err != nil {
				t.Errorf("ending %s: %v", h.name, err)
			}
		})
		if _, err := tb.Run(ctx, "sh", "-c", "echo hello from the project > "+filepath.Join(tb.Btrfs.Project, "hello.txt")); err != nil {
			t.Fatal(err)
		}
		if err := tb.InstallServiceOn(ctx, repo, filepath.Join(repo, "bin", "sandboxd"), tb.SandboxdConfig("")); err != nil {
			t.Fatalf("installing sandboxd on %s: %v", h.name, err)
		}
		if h.bus, err = client.ConnectAddress(ctx, tb.BusAddress()); err != nil {
			t.Fatalf("connecting to %s's bus: %v", h.name, err)
		}
		hosts = append(hosts, h)
	}
	return hosts
}

// startKubelet runs the host's sandboxd-kubelet here, outside the host, a
// client of the host's bus: the kubelet API on a loopback port of its own.
func startKubelet(ctx context.Context, t *testing.T, cp *fleet.ControlPlane, h *host) {
	t.Helper()
	files, err := cp.Kubelet(h.name)
	if err != nil {
		t.Fatal(err)
	}
	port, err := fleet.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(cp.Dir, "kubelet-"+h.name+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	cmd := exec.Command(filepath.Join(repo, "bin", "sandboxd-kubelet"),
		"--kubeconfig="+files.Kubeconfig, "--node-name="+h.name, "--node-ip=127.0.0.1",
		fmt.Sprintf("--listen=127.0.0.1:%d", port),
		"--tls-cert-file="+files.Cert, "--tls-private-key-file="+files.Key,
		"--client-ca-file="+files.ClientCA, "--status-interval=5s")
	cmd.Env = append(os.Environ(), "DBUS_SYSTEM_BUS_ADDRESS="+h.tb.BusAddress())
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("the end of %s's kubelet log:\n%s", h.name, fleet.Tail(logPath, 40))
		}
	})
}

// attachTicks runs kubectl attach on pod until a "tick" comes through it,
// then ends it (by its pid).
func attachTicks(ctx context.Context, t *testing.T, cp *fleet.ControlPlane, pod string) {
	t.Helper()
	cmd := cp.KubectlCommand(ctx, "attach", pod)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatalf("kubectl attach %s ended before a tick: %s", pod, stderr.String())
			}
			if line == "tick" {
				return
			}
		case <-time.After(2 * time.Minute):
			t.Fatalf("kubectl attach %s: no tick in 2 minutes (a safety net: one comes each second): %s", pod, stderr.String())
		}
	}
}

// waitNode waits for node's Ready condition to be status.
func waitNode(ctx context.Context, t *testing.T, cp *fleet.ControlPlane, node, status string) {
	t.Helper()
	if err := cp.WaitFor(ctx, fmt.Sprintf("node %s Ready=%s", node, status), 3*time.Minute, func() (bool, error) {
		out, err := cp.Kubectl(ctx, "get", "node", node, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
		return err == nil && out == status, nil
	}); err != nil {
		t.Fatal(err)
	}
}

// apply creates or updates the objects of a manifest.
func apply(ctx context.Context, t *testing.T, cp *fleet.ControlPlane, manifest string) {
	t.Helper()
	path := filepath.Join(cp.Dir, fmt.Sprintf("manifest-%d.yaml", time.Now().UnixNano()))
	if err := os.WriteFile(path, []byte(manifest), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := cp.Kubectl(ctx, "apply", "-f", path); err != nil {
		t.Fatal(err)
	}
}

// template is the SandboxTemplate of project web's sandboxes: pods meant
// for sandboxd nodes (their taint tolerated, the project's label
// selected), the image naming the project, a background process.
func template() string {
	return `apiVersion: extensions.agents.x-k8s.io/v1beta1
kind: SandboxTemplate
metadata:
  name: web
spec:
  podTemplate:
    spec:
      nodeSelector:
        project.sandboxd.io/web: "true"
      tolerations:
      - key: sandboxd.io/sandbox
        operator: Exists
        effect: NoSchedule
      containers:
      - name: agent
        image: sandboxd.io/project/web
        command: ["sh", "-c", "echo started; while sleep 1; do echo tick; done"]
        resources:
          requests:
            cpu: 100m
            memory: 64Mi
          limits:
            memory: 256Mi
      restartPolicy: Never
`
}

func warmPool(name string, replicas int) string {
	return fmt.Sprintf(`apiVersion: extensions.agents.x-k8s.io/v1beta1
kind: SandboxWarmPool
metadata:
  name: %s
spec:
  replicas: %d
  sandboxTemplateRef:
    name: web
`, name, replicas)
}

func claim(name, pool string) string {
	return fmt.Sprintf(`apiVersion: extensions.agents.x-k8s.io/v1beta1
kind: SandboxClaim
metadata:
  name: %s
spec:
  warmPoolRef:
    name: %s
`, name, pool)
}

// waitClaimsReady waits for each claim's Ready condition and returns, for
// those with a creation time given, how long each took.
func waitClaimsReady(ctx context.Context, t *testing.T, cp *fleet.ControlPlane, claims []string, created map[string]time.Time) []time.Duration {
	t.Helper()
	var took []time.Duration
	pending := slices.Clone(claims)
	if err := cp.WaitFor(ctx, fmt.Sprintf("%d claims to be Ready", len(claims)), 5*time.Minute, func() (bool, error) {
		out, err := cp.Kubectl(ctx, "get", "sandboxclaim.extensions.agents.x-k8s.io", "-o", "json")
		if err != nil {
			return false, nil
		}
		ready := readyObjects(out)
		pending = slices.DeleteFunc(pending, func(c string) bool {
			if !ready[c] {
				return false
			}
			if at, ok := created[c]; ok {
				took = append(took, time.Since(at))
			}
			return true
		})
		return len(pending) == 0, nil
	}); err != nil {
		out, _ := cp.Kubectl(ctx, "get", "sandboxclaim.extensions.agents.x-k8s.io,sandbox.agents.x-k8s.io,pods", "-o", "wide")
		t.Fatalf("%v (still pending: %v)\n%s", err, pending, out)
	}
	return took
}

// readyObjects names the objects of a kubectl list whose Ready condition
// is True.
func readyObjects(list string) map[string]bool {
	var l struct {
		Items []struct {
			Metadata struct{ Name string }
			Status   struct {
				Conditions []struct{ Type, Status string }
			}
		}
	}
	ready := map[string]bool{}
	if json.Unmarshal([]byte(list), &l) != nil {
		return ready
	}
	for _, it := range l.Items {
		for _, c := range it.Status.Conditions {
			if c.Type == "Ready" && c.Status == "True" {
				ready[it.Metadata.Name] = true
			}
		}
	}
	return ready
}

// claimSandbox is the name of the Sandbox a claim got.
func claimSandbox(ctx context.Context, t *testing.T, cp *fleet.ControlPlane, claim string) string {
	t.Helper()
	out, err := cp.Kubectl(ctx, "get", "sandboxclaim.extensions.agents.x-k8s.io", claim, "-o", "jsonpath={.status.sandbox.name}")
	if err != nil || out == "" {
		t.Fatalf("claim %s's sandbox: %q, %v", claim, out, err)
	}
	return out
}

// claimPod is the pod behind a claim: its Sandbox's pod, of the same name
// unless the Sandbox's annotation names another.
func claimPod(ctx context.Context, t *testing.T, cp *fleet.ControlPlane, claim string) string {
	t.Helper()
	sb := claimSandbox(ctx, t, cp, claim)
	out, err := cp.Kubectl(ctx, "get", "sandbox.agents.x-k8s.io", sb, "-o", `jsonpath={.metadata.annotations.agents\.x-k8s\.io/pod-name}`)
	if err == nil && out != "" {
		return out
	}
	return sb
}

func podNode(ctx context.Context, t *testing.T, cp *fleet.ControlPlane, pod string) string {
	t.Helper()
	out, err := cp.Kubectl(ctx, "get", "pod", pod, "-o", "jsonpath={.spec.nodeName}")
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// waitWarmReady waits for n of a warm pool's sandboxes to be Ready and
// returns their names.
func waitWarmReady(ctx context.Context, t *testing.T, cp *fleet.ControlPlane, pool string, n int) []string {
	t.Helper()
	var names []string
	if err := cp.WaitFor(ctx, fmt.Sprintf("warm pool %s to hold %d ready sandboxes", pool, n), 5*time.Minute, func() (bool, error) {
		out, err := cp.Kubectl(ctx, "get", "sandbox.agents.x-k8s.io", "-o", "json")
		if err != nil {
			return false, nil
		}
		names = warmSandboxes(out, pool)
		return len(names) == n, nil
	}); err != nil {
		out, _ := cp.Kubectl(ctx, "get", "sandboxwarmpool.extensions.agents.x-k8s.io,sandbox.agents.x-k8s.io,pods", "-o", "wide")
		t.Fatalf("%v: have %v\n%s", err, names, out)
	}
	return names
}

// warmSandboxes names the Ready Sandboxes a warm pool owns (and no claim).
func warmSandboxes(list, pool string) []string {
	var l struct {
		Items []struct {
			Metadata struct {
				Name            string
				OwnerReferences []struct{ Kind, Name string }
			}
			Status struct {
				Conditions []struct{ Type, Status string }
			}
		}
	}
	if json.Unmarshal([]byte(list), &l) != nil {
		return nil
	}
	var names []string
	for _, it := range l.Items {
		owned := false
		for _, o := range it.Metadata.OwnerReferences {
			if o.Kind == "SandboxWarmPool" && o.Name == pool {
				owned = true
			}
		}
		ready := false
		for _, c := range it.Status.Conditions {
			ready = ready || (c.Type == "Ready" && c.Status == "True")
		}
		if owned && ready {
			names = append(names, it.Metadata.Name)
		}
	}
	sort.Strings(names)
	return names
}

// checkSandboxesOnTheirHosts checks that each claim's pod is bound to a
// node and runs as a sandbox on that node's host (the pod's container id
// is sandboxd://ID, an ID that host's sandboxd lists), and counts them per
// node.
func checkSandboxesOnTheirHosts(ctx context.Context, t *testing.T, cp *fleet.ControlPlane, hosts []*host, claims []string) map[string]int {
	t.Helper()
	listed := map[string][]string{}
	for _, h := range hosts {
		list, err := h.bus.List(ctx)
		if err != nil {
			t.Fatalf("listing %s's sandboxes: %v", h.name, err)
		}
		for _, e := range list {
			listed[h.name] = append(listed[h.name], e.ID)
		}
	}
	perNode := map[string]int{}
	for _, c := range claims {
		pod := claimPod(ctx, t, cp, c)
		out, err := cp.Kubectl(ctx, "get", "pod", pod, "-o", "jsonpath={.spec.nodeName} {.status.containerStatuses[0].containerID}")
		if err != nil {
			t.Fatal(err)
		}
		node, cid, _ := strings.Cut(out, " ")
		id, ok := strings.CutPrefix(cid, "sandboxd://")
		if !ok || !slices.Contains(listed[node], id) {
			t.Errorf("claim %s: pod %s on node %s has container %q, not a sandbox %s lists (%v)", c, pod, node, cid, node, listed[node])
		}
		perNode[node]++
	}
	return perNode
}
