// Package fleet runs sandboxd hosts under a real Kubernetes control plane
// for the fleet test (`make fleet-test`): etcd from Debian's etcd-server,
// kube-apiserver, kube-scheduler and kube-controller-manager v1.37.2 and
// the agent-sandbox controller v0.5.6, built from the Go module proxy by
// tests/fleet/tools/build.sh into .tools/fleet/. Everything listens on
// loopback only; every process is the test's child, ended by its pid.
package fleet

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ControlPlane is a running control plane: etcd, the apiserver, the
// scheduler, the controller manager (garbage collection, service accounts,
// node lifecycle, namespaces) and the agent-sandbox controller with its
// extensions (claims, templates, warm pools), its CRDs applied.
type ControlPlane struct {
	Dir        string // its files: certificates, kubeconfigs, logs, etcd's data
	Tools      string // the tools' directory (.tools/fleet)
	Server     string // https://127.0.0.1:PORT
	Kubeconfig string // the admin's (system:masters)
	pki        *pki
	tokens     map[string]string // user → bearer token, as in tokens.csv
	procs      []*proc
}

// proc is a process the control plane started, ended by its pid.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

// Tools says where the built tools are: $FLEET_TOOLS, or .tools/fleet in
// the repository. It fails with what to run when one is missing.
func Tools(repo string) (string, error) {
	dir := os.Getenv("FLEET_TOOLS")
	if dir == "" {
		dir = filepath.Join(repo, ".tools", "fleet")
	}
	for _, name := range []string{"etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager", "kubectl", "agent-sandbox-controller"} {
		if _, err := os.Stat(filepath.Join(dir, "bin", name)); err != nil {
			return "", fmt.Errorf("the fleet's %s is not built in %s: run `make fleet-tools` (tests/fleet/tools/build.sh; about 20 minutes the first time)", name, dir)
		}
	}
	return dir, nil
}

// StartControlPlane starts the control plane in dir (made if missing)
// with the tools in tools, and returns once the apiserver is ready, the
// CRDs are established and the default service account exists.
func StartControlPlane(ctx context.Context, tools, dir string) (cp *ControlPlane, err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("making the control plane's directory: %w", err)
	}
	cp = &ControlPlane{Dir: dir, Tools: tools, tokens: map[string]string{}}
	defer func() {
		if err != nil {
			cp.Stop()
			cp = nil
		}
	}()
	if cp.pki, err = newPKI(dir); err != nil {
		return cp, err
	}
	ports, err := freePorts(3)
	if err != nil {
		return cp, err
	}
	etcdClient, etcdPeer, apiPort := ports[0], ports[1], ports[2]
	cp.Server = fmt.Sprintf("https://127.0.0.1:%d", apiPort)

	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", etcdClient)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", etcdPeer)
	if err := cp.start(ctx, "etcd", nil,
		"--name=fleet", "--data-dir="+filepath.Join(dir, "etcd"),
		"--listen-client-urls="+etcdURL, "--advertise-client-urls="+etcdURL,
		"--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=fleet="+peerURL); err != nil {
		return cp, err
	}

	loopback := []net.IP{net.ParseIP("127.0.0.1")}
	srvCert, srvKey, err := cp.pki.issue("apiserver", "kubernetes", nil, loopback)
	if err != nil {
		return cp, err
	}
	// The apiserver's certificate towards the kubelets (exec, logs): a
	// kubelet authenticates it by this CA and asks the apiserver whether it
	// may (SubjectAccessReview), as kubeadm's clusters do.
	kcCert, kcKey, err := cp.pki.issue("apiserver-kubelet-client", "kube-apiserver-kubelet-client", []string{"system:masters"}, nil)
	if err != nil {
		return cp, err
	}
	saPub, saKey, err := cp.pki.serviceAccountKeys()
	if err != nil {
		return cp, err
	}
	tokensFile, err := cp.writeTokens()
	if err != nil {
		return cp, err
	}
	if err := cp.start(ctx, "kube-apiserver", nil,
		"--etcd-servers="+etcdURL,
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(apiPort),
		"--endpoint-reconciler-type=none",
		"--tls-cert-file="+srvCert, "--tls-private-key-file="+srvKey,
		"--client-ca-file="+cp.pki.CA(),
		"--token-auth-file="+tokensFile,
		"--service-account-key-file="+saPub, "--service-account-signing-key-file="+saKey,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-cluster-ip-range=10.96.0.0/16",
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction",
		"--kubelet-client-certificate="+kcCert, "--kubelet-client-key="+kcKey,
		"--kubelet-certificate-authority="+cp.pki.CA(),
		"--kubelet-preferred-address-types=InternalIP",
	); err != nil {
		return cp, err
	}
	if cp.Kubeconfig, err = cp.WriteKubeconfig("admin", "admin"); err != nil {
		return cp, err
	}
	if err := cp.waitReady(ctx); err != nil {
		return cp, err
	}

	if err := cp.start(ctx, "kube-scheduler", nil,
		"--kubeconfig="+cp.Kubeconfig, "--leader-elect=false", "--secure-port=0"); err != nil {
		return cp, err
	}
	if err := cp.start(ctx, "kube-controller-manager", nil,
		"--kubeconfig="+cp.Kubeconfig, "--leader-elect=false", "--secure-port=0",
		"--controllers=garbagecollector,serviceaccount,nodelifecycle,namespace",
		"--service-account-private-key-file="+saKey, "--root-ca-file="+cp.pki.CA(),
		"--use-service-account-credentials=false"); err != nil {
		return cp, err
	}
	if _, err := cp.Kubectl(ctx, "apply", "--server-side", "-f", filepath.Join(tools, "crds")); err != nil {
		return cp, fmt.Errorf("applying agent-sandbox's CRDs: %w", err)
	}
	if _, err := cp.Kubectl(ctx, "wait", "--for=condition=Established", "--timeout=120s", "crd", "--all"); err != nil {
		return cp, err
	}
	if err := cp.start(ctx, "agent-sandbox-controller", nil,
		"-kubeconfig="+cp.Kubeconfig, "-extensions", "-leader-elect=false",
		"-enable-webhook=false", "-manage-webhook-certs=false",
		"-metrics-bind-address=0", "-health-probe-bind-address=0"); err != nil {
		return cp, err
	}
	// Pods need their namespace's service account, which the controller
	// manager's serviceaccount controller makes.
	if err := cp.WaitFor(ctx, "the default service account", 2*time.Minute, func() (bool, error) {
		_, err := cp.Kubectl(ctx, "get", "serviceaccount", "default", "-n", "default")
		return err == nil, nil
	}); err != nil {
		return cp, err
	}
	return cp, nil
}

// writeTokens makes the apiserver's static token file: the admin
// (system:masters) and one token per node (filled in by NodeToken before
// the apiserver starts: see AddNode).
func (cp *ControlPlane) writeTokens() (string, error) {
	cp.tokens["admin"] = randomToken()
	var b strings.Builder
	fmt.Fprintf(&b, "%s,admin,admin,system:masters\n", cp.tokens["admin"])
	for _, node := range nodeNames {
		user := "system:node:" + node
		cp.tokens[user] = randomToken()
		fmt.Fprintf(&b, "%s,%s,%s,system:nodes\n", cp.tokens[user], user, user)
	}
	path := filepath.Join(cp.Dir, "tokens.csv")
	return path, os.WriteFile(path, []byte(b.String()), 0o600)
}

// nodeNames are the nodes the control plane has credentials for.
var nodeNames = []string{"host-a", "host-b"}

// WriteKubeconfig writes a kubeconfig for user (as in tokens.csv) to
// name.kubeconfig and returns its path.
func (cp *ControlPlane) WriteKubeconfig(name, user string) (string, error) {
	token, ok := cp.tokens[user]
	if !ok {
		return "", fmt.Errorf("no token for %q: the control plane knows %v", user, nodeNames)
	}
	cfg := map[string]any{
		"apiVersion":      "v1",
		"kind":            "Config",
		"clusters":        []any{map[string]any{"name": "fleet", "cluster": map[string]any{"server": cp.Server, "certificate-authority": cp.pki.CA()}}},
		"users":           []any{map[string]any{"name": user, "user": map[string]any{"token": token}}},
		"contexts":        []any{map[string]any{"name": "fleet", "context": map[string]any{"cluster": "fleet", "user": user}}},
		"current-context": "fleet",
	}
	data, err := json.Marshal(cfg)
	if err != nil {
		return "", err
	}
	path := filepath.Join(cp.Dir, name+".kubeconfig")
	return path, os.WriteFile(path, data, 0o600)
}

// KubeletFiles are what a node's sandboxd-kubelet is given.
type KubeletFiles struct {
	Kubeconfig, Cert, Key, ClientCA string
}

// Kubelet makes a node's credentials: a kubeconfig as system:node:NAME and
// a serving certificate for 127.0.0.1 that the apiserver checks.
func (cp *ControlPlane) Kubelet(node string) (KubeletFiles, error) {
	kc, err := cp.WriteKubeconfig(node, "system:node:"+node)
	if err != nil {
		return KubeletFiles{}, err
	}
	cert, key, err := cp.pki.issue("kubelet-"+node, node, nil, []net.IP{net.ParseIP("127.0.0.1")})
	if err != nil {
		return KubeletFiles{}, err
	}
	return KubeletFiles{Kubeconfig: kc, Cert: cert, Key: key, ClientCA: cp.pki.CA()}, nil
}

// Kubectl runs kubectl (the tools', of the apiserver's version) as the admin and returns its standard output; an
// error carries its standard error.
func (cp *ControlPlane) Kubectl(ctx context.Context, args ...string) (string, error) {
	cmd := cp.KubectlCommand(ctx, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}

// KubectlCommand is kubectl as the admin, for a caller that streams.
func (cp *ControlPlane) KubectlCommand(ctx context.Context, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, filepath.Join(cp.Tools, "bin", "kubectl"), append([]string{"--kubeconfig=" + cp.Kubeconfig}, args...)...)
}

// WaitFor polls cond until it holds, it fails, or timeout passes (a safety
// net: the state is what is waited on).
func (cp *ControlPlane) WaitFor(ctx context.Context, what string, timeout time.Duration, cond func() (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		ok, err := cond()
		if err != nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		if ok {
			return nil
		}
		if dead := cp.dead(); dead != "" {
			return fmt.Errorf("waiting for %s: %s", what, dead)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: gave up after %s", what, timeout)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func (cp *ControlPlane) waitReady(ctx context.Context) error {
	return cp.WaitFor(ctx, "the apiserver's /readyz", 3*time.Minute, func() (bool, error) {
		out, err := cp.Kubectl(ctx, "get", "--raw=/readyz")
		return err == nil && strings.TrimSpace(out) == "ok", nil
	})
}

// start runs one of the tools as the test's child, its output to NAME.log.
func (cp *ControlPlane) start(ctx context.Context, name string, env []string, args ...string) error {
	logPath := filepath.Join(cp.Dir, name+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return fmt.Errorf("starting %s: %w", name, err)
	}
	defer logFile.Close()
	cmd := exec.Command(filepath.Join(cp.Tools, "bin", name), args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// It dies with the test, even on SIGKILL.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	cp.procs = append(cp.procs, p)
	return nil
}

// dead names a process of the control plane that exited, with the end of
// its log, or is "".
func (cp *ControlPlane) dead() string {
	for _, p := range cp.procs {
		select {
		case <-p.done:
			return fmt.Sprintf("%s exited (%v); the end of %s:\n%s", p.name, p.cmd.ProcessState, p.log, Tail(p.log, 20))
		default:
		}
	}
	return ""
}

// Stop ends the control plane's processes, the last started first, each
// by its pid.
func (cp *ControlPlane) Stop() {
	for i := len(cp.procs) - 1; i >= 0; i-- {
		p := cp.procs[i]
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	}
	cp.procs = nil
}

// Tail is the last n lines of the file at path.
func Tail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// freePorts finds n free loopback ports (held until all are found, so
// they differ).
func freePorts(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("finding a free loopback port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// FreePort is one free loopback port.
func FreePort() (int, error) {
	p, err := freePorts(1)
	if err != nil {
		return 0, err
	}
	return p[0], nil
}

// randomToken is a bearer token for tokens.csv.
func randomToken() string { return rand.Text() }
