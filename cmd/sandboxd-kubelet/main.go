// Command sandboxd-kubelet puts a sandboxd host under a Kubernetes
// cluster as a node: a virtual-kubelet provider (package kubelet) that
// maps pods onto sandboxes over the Go client. docs/fleet.md says how.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	vklog "github.com/virtual-kubelet/virtual-kubelet/log"
	vkslog "github.com/virtual-kubelet/virtual-kubelet/log/slog"
	"github.com/virtual-kubelet/virtual-kubelet/node"
	"github.com/virtual-kubelet/virtual-kubelet/node/nodeutil"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/sandboxd/sandboxd/kubelet"
)

// version is set at build time from `git describe` (see the Makefile).
var version = "dev"

// flags are the command's flags (docs/fleet.md).
type flags struct {
	kubeconfig, nodeName, nodeIP, listen string
	certFile, keyFile, clientCAFile      string
	projects                             string
	statusInterval                       time.Duration
	allowHostNetwork                     bool
	debug, showVersion                   bool
}

func parseFlags(args []string) (flags, error) {
	var f flags
	host, _ := os.Hostname()
	fs := flag.NewFlagSet("sandboxd-kubelet", flag.ContinueOnError)
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "the node's kubeconfig (required): a user system:node:NAME in group system:nodes")
	fs.StringVar(&f.nodeName, "node-name", host, "the node's name")
	fs.StringVar(&f.nodeIP, "node-ip", "", "the node's InternalIP, also its pods' IP (default: the host's first non-loopback address)")
	fs.StringVar(&f.listen, "listen", ":10250", "the kubelet API's address (exec, logs)")
	fs.StringVar(&f.certFile, "tls-cert-file", "", "the kubelet API's serving certificate (required)")
	fs.StringVar(&f.keyFile, "tls-private-key-file", "", "its private key (required)")
	fs.StringVar(&f.clientCAFile, "client-ca-file", "", "the CA of the kubelet API's client certificates (the apiserver's --kubelet-client-certificate)")
	fs.StringVar(&f.projects, "projects", "", "the projects to advertise, the only ones its pods may use, comma-separated (default: all the projects sandboxd lets this user use)")
	fs.BoolVar(&f.allowHostNetwork, "allow-host-network", false, "let a pod's sandbox have the host's network (annotation sandboxd.io/network: host, or a profile's); without it such a pod fails")
	fs.DurationVar(&f.statusInterval, "status-interval", 10*time.Second, "how often sandboxd is asked whether it answers and how the pods' sandboxes stand")
	fs.BoolVar(&f.debug, "debug", false, "log at debug level")
	fs.BoolVar(&f.showVersion, "version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		return f, err
	}
	if f.showVersion {
		return f, nil
	}
	if fs.NArg() > 0 {
		return f, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	for name, v := range map[string]string{"--kubeconfig": f.kubeconfig, "--tls-cert-file": f.certFile, "--tls-private-key-file": f.keyFile, "--node-name": f.nodeName} {
		if v == "" {
			return f, fmt.Errorf("%s is required", name)
		}
	}
	if f.statusInterval < time.Second {
		return f, fmt.Errorf("--status-interval %s: at least 1s", f.statusInterval)
	}
	return f, nil
}

func main() {
	f, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "sandboxd-kubelet:", err)
		os.Exit(2)
	}
	if f.showVersion {
		fmt.Println("sandboxd-kubelet", version)
		return
	}
	level := slog.LevelInfo
	if f.debug {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	// virtual-kubelet's own log (the node, its pods' sync), which is
	// silent unless given one.
	vklog.L = vkslog.FromSlog(log)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, f, log); err != nil && ctx.Err() == nil {
		log.Error("sandboxd-kubelet ended", "error", err)
		os.Exit(1)
	}
}

// run registers the node and serves it until ctx ends.
func run(ctx context.Context, f flags, log *slog.Logger) error {
	_, portText, err := net.SplitHostPort(f.listen)
	if err != nil {
		return fmt.Errorf("--listen %q: %w", f.listen, err)
	}
	port, err := strconv.ParseUint(portText, 10, 16)
	if err != nil || port == 0 {
		return fmt.Errorf("--listen %q: a port from 1 to 65535", f.listen)
	}
	if f.nodeIP == "" {
		if f.nodeIP, err = firstAddress(); err != nil {
			return err
		}
	}
	if net.ParseIP(f.nodeIP) == nil {
		return fmt.Errorf("--node-ip %q is not an IP address", f.nodeIP)
	}
	rc, err := clientcmd.BuildConfigFromFlags("", f.kubeconfig)
	if err != nil {
		return fmt.Errorf("--kubeconfig %s: %w", f.kubeconfig, err)
	}
	// A node's pods' status, leases and annotations: more than
	// client-go's default 5 calls a second when a warm pool fills.
	rc.QPS, rc.Burst = 50, 100
	kube, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("--kubeconfig %s: %w", f.kubeconfig, err)
	}
	auth, err := webhookAuth(kube, f)
	if err != nil {
		return err
	}
	projects, err := projectList(f.projects)
	if err != nil {
		return err
	}
	var provider *kubelet.Provider
	mux := http.NewServeMux()
	n, err := nodeutil.NewNode(f.nodeName, func(pc nodeutil.ProviderConfig) (nodeutil.Provider, node.NodeProvider, error) {
		provider = kubelet.New(kubelet.Config{
			NodeName: f.nodeName, NodeIP: f.nodeIP, Port: int32(port),
			Projects: projects, AllowHostNetwork: f.allowHostNetwork, StatusInterval: f.statusInterval,
			Pods: pc.Pods, Log: log,
		})
		provider.ConfigureNode(ctx, pc.Node)
		return provider, provider, nil
	},
		nodeutil.WithClient(kube),
		nodeutil.AttachProviderRoutes(mux),
		nodeutil.WithTLSConfig(nodeutil.WithKeyPairFromPath(f.certFile, f.keyFile), clientCA(f.clientCAFile)),
		func(cfg *nodeutil.NodeConfig) error {
			cfg.HTTPListenAddr = f.listen
			cfg.Handler = nodeutil.WithAuth(auth, mux)
			cfg.StreamIdleTimeout = 4 * time.Hour
			cfg.StreamCreationTimeout = 30 * time.Second
			cfg.NumWorkers = max(cfg.NumWorkers, 4)
			return nil
		},
	)
	if err != nil {
		return err
	}
	go func() {
		if err := n.WaitReady(ctx, 0); err == nil {
			log.Info("the node is registered", "node", f.nodeName, "ip", f.nodeIP, "listen", f.listen)
			provider.Run(ctx)
		}
	}()
	return n.Run(ctx)
}

// webhookAuth authenticates the kubelet API's callers as a kubelet does
// in webhook mode: a client certificate signed by --client-ca-file, or a
// bearer token the apiserver vouches for (TokenReview); and authorizes
// each request by a SubjectAccessReview (nodes/proxy, nodes/log, ...).
// No anonymous caller.
func webhookAuth(kube kubernetes.Interface, f flags) (nodeutil.Auth, error) {
	return nodeutil.WebhookAuth(kube, f.nodeName, func(cfg *nodeutil.WebhookAuthConfig) error {
		if f.clientCAFile == "" {
			return nil
		}
		ca, err := dynamiccertificates.NewDynamicCAContentFromFile("client-ca", f.clientCAFile)
		if err != nil {
			return fmt.Errorf("--client-ca-file %s: %w", f.clientCAFile, err)
		}
		cfg.AuthnConfig.ClientCertificateCAContentProvider = ca
		return nil
	})
}

// clientCA has the TLS server verify a client certificate, when one is
// given, against the CA file (a bearer token's caller gives none).
func clientCA(path string) func(*tls.Config) error {
	return func(cfg *tls.Config) error {
		if path == "" {
			return nil
		}
		pem, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("--client-ca-file: %w", err)
		}
		if err := nodeutil.WithCACert(pem)(cfg); err != nil {
			return fmt.Errorf("--client-ca-file %s: %w", path, err)
		}
		cfg.ClientAuth = tls.VerifyClientCertIfGiven
		return nil
	}
}

// firstAddress is the host's first non-loopback IP address.
func firstAddress() (string, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return "", fmt.Errorf("finding the node's IP: %w", err)
	}
	for _, a := range addrs {
		if ip, ok := a.(*net.IPNet); ok && !ip.IP.IsLoopback() && !ip.IP.IsLinkLocalUnicast() {
			return ip.IP.String(), nil
		}
	}
	return "", errors.New("finding the node's IP: no address but loopback; give --node-ip")
}

// projectList reads --projects: names split on commas, spaces around
// them dropped ("web, api"); an empty name is refused, not taken as none.
func projectList(flag string) ([]string, error) {
	if flag == "" {
		return nil, nil
	}
	var names []string
	for _, name := range strings.Split(flag, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			return nil, fmt.Errorf("--projects %q: an empty project name; give names split by commas, e.g. --projects web,api", flag)
		}
		names = append(names, name)
	}
	return names, nil
}
