package kubelet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/virtual-kubelet/virtual-kubelet/errdefs"
	corev1 "k8s.io/api/core/v1"
	corev1listers "k8s.io/client-go/listers/core/v1"

	"github.com/sandboxd/sandboxd/client"
)

// Config is what cmd/sandboxd-kubelet gives the provider.
type Config struct {
	// NodeName and NodeIP are the node's name and InternalIP (also every
	// pod's IP); Port is the kubelet API's port.
	NodeName, NodeIP string
	Port             int32
	// Projects are the projects advertised as labels; nil: all the
	// projects the kubelet's user may use.
	Projects []string
	// AllowHostNetwork lets a pod's sandbox have the host's network
	// (annotation sandboxd.io/network: host, or a profile's network);
	// without it such a pod fails: the host's loopback services (an
	// etcd, the kubelet API, a database) would be its.
	AllowHostNetwork bool
	// StatusInterval is how often sandboxd is asked whether it answers
	// (the node's Ready) and how its pods' sandboxes stand.
	StatusInterval time.Duration
	// Pods is the pod controller's lister of this node's pods.
	Pods corev1listers.PodLister
	Log  *slog.Logger
	// Connect connects to sandboxd (client.Connect, which honours
	// DBUS_SYSTEM_BUS_ADDRESS).
	Connect func(context.Context) (*client.Client, error)
}

// maxCreates bounds the sandboxes made at once: the daemon serves a
// caller four heavy calls at once, and exec needs some.
const maxCreates = 3

// Provider is the virtual-kubelet provider: nodeutil.Provider,
// node.PodNotifier and node.NodeProvider.
type Provider struct {
	cfg     Config
	log     *slog.Logger
	creates chan struct{}
	// uid is the kubelet's user: the only owner whose sandboxes it
	// finds, adopts, sweeps or destroys (root's calls see every owner's).
	uid uint32

	connMu sync.Mutex
	conn   *client.Client

	mu        sync.Mutex
	pods      map[string]*podEntry // by namespace/name
	notifyPod func(*corev1.Pod)

	node nodeState
}

// New makes the provider; Run starts its loops once virtual-kubelet's
// node runs.
func New(cfg Config) *Provider {
	if cfg.StatusInterval <= 0 {
		cfg.StatusInterval = 10 * time.Second
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Connect == nil {
		cfg.Connect = client.Connect
	}
	return &Provider{cfg: cfg, log: cfg.Log, creates: make(chan struct{}, maxCreates), pods: map[string]*podEntry{}, uid: uint32(os.Geteuid())}
}

// client is the connection to sandboxd, made again when the bus's went
// (a daemon's restart leaves it standing).
func (p *Provider) client(ctx context.Context) (*client.Client, error) {
	p.connMu.Lock()
	defer p.connMu.Unlock()
	if p.conn != nil && p.conn.Connected() {
		return p.conn, nil
	}
	if p.conn != nil {
		_ = p.conn.Close()
		p.conn = nil
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c, err := p.cfg.Connect(ctx)
	if err != nil {
		return nil, err
	}
	p.conn = c
	return c, nil
}

// Run runs the status loop until ctx ends: the node's readiness and
// labels, the pods' sandboxes, the sandboxes of pods gone.
func (p *Provider) Run(ctx context.Context) {
	t := time.NewTicker(p.cfg.StatusInterval)
	defer t.Stop()
	for {
		p.probeNode(ctx)
		p.syncPods(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// call bounds one call of the status loop.
func (p *Provider) callCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, max(p.cfg.StatusInterval/2, 3*time.Second))
}

// transient says whether a create refused now may pass later.
func transient(err error) bool {
	return errors.Is(err, client.ErrBusy) || errors.Is(err, client.ErrLimitReached) || errors.Is(err, client.ErrNotRunning)
}

func podKey(namespace, name string) string { return namespace + "/" + name }

// errNoSuchPod is ErrNoSuchPod as virtual-kubelet's NotFound.
func errNoSuchPod(namespace, name string) error {
	return errdefs.AsNotFound(fmt.Errorf("pod %s/%s: %w", namespace, name, ErrNoSuchPod))
}
