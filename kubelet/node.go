package kubelet

import (
	"context"
	"maps"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/sandboxd1"
)

// The node's labels and taint.
const (
	LabelNode    = "sandboxd.io/node"     // "true" on every sandboxd node
	LabelPool    = "sandboxd.io/pool"     // btrfs or zfs
	LabelIdmap   = "sandboxd.io/idmap"    // whether its sandboxes get a user namespace
	LabelProject = "project.sandboxd.io/" // + <name>: "true" per project advertised
	// TaintKey is the node's NoSchedule taint (value "true"): only pods
	// that tolerate it land on a sandboxd node.
	TaintKey = "sandboxd.io/sandbox"
	// KubeletVersion is what the node reports as its kubelet.
	KubeletVersion = "v1.37.2-sandboxd"
	// defaultMaxPods is the node's pods capacity when sandboxd bounds
	// none (Kubernetes' kubelet default).
	defaultMaxPods = 110
)

// nodeState is the node as last told to virtual-kubelet.
type nodeState struct {
	mu    sync.Mutex
	cb    func(*corev1.Node)
	node  *corev1.Node // the node as registered, then as last told
	ready bool
	idmap string // "true", "false", "" unknown
}

// Facts is what the node says of the host, from sandboxd.
type Facts struct {
	// Projects are the projects advertised.
	Projects []sandboxd1.ProjectEntry
	// MaxSandboxes bounds the pods (0: none known).
	MaxSandboxes uint64
	// Idmap is "true" or "false" once a sandbox told, "" before.
	Idmap string
}

// Pool is the pool's kind as its projects' locations say: a btrfs
// subvolume is a path, a ZFS dataset is not; "" with no project.
func (f Facts) Pool() string {
	switch {
	case len(f.Projects) == 0:
		return ""
	case strings.HasPrefix(f.Projects[0].Location, "/"):
		return "btrfs"
	default:
		return "zfs"
	}
}

// NodeLabels are the node's labels for facts, over base (its labels as
// registered, whose project labels are replaced).
func NodeLabels(base map[string]string, f Facts) map[string]string {
	l := map[string]string{}
	for k, v := range base {
		// virtual-kubelet's kubernetes.io/role is a label the
		// NodeRestriction admission plugin refuses a node.
		if !strings.HasPrefix(k, LabelProject) && k != "kubernetes.io/role" {
			l[k] = v
		}
	}
	l["type"] = "virtual-kubelet"
	l["kubernetes.io/os"] = "linux"
	l[LabelNode] = "true"
	for _, pr := range f.Projects {
		l[LabelProject+pr.Name] = "true"
	}
	if pool := f.Pool(); pool != "" {
		l[LabelPool] = pool
	}
	if f.Idmap != "" {
		l[LabelIdmap] = f.Idmap
	}
	return l
}

// ConfigureNode fills the node virtual-kubelet registers: addresses, the
// kubelet API's port, capacity, labels, taint, and its conditions (Ready
// once sandboxd answered).
func (p *Provider) ConfigureNode(ctx context.Context, n *corev1.Node) {
	n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: TaintKey, Value: "true", Effect: corev1.TaintEffectNoSchedule})
	n.Status.Addresses = []corev1.NodeAddress{
		{Type: corev1.NodeInternalIP, Address: p.cfg.NodeIP},
		{Type: corev1.NodeHostName, Address: p.cfg.NodeName},
	}
	n.Status.DaemonEndpoints.KubeletEndpoint.Port = p.cfg.Port
	n.Status.NodeInfo = corev1.NodeSystemInfo{
		OperatingSystem: "linux",
		Architecture:    runtime.GOARCH,
		KubeletVersion:  KubeletVersion,
	}
	facts, err := p.facts(ctx)
	p.node.mu.Lock()
	defer p.node.mu.Unlock()
	p.node.node = n
	p.applyFacts(n, facts, err == nil)
}

// applyFacts sets n's labels, capacity and conditions.
func (p *Provider) applyFacts(n *corev1.Node, f Facts, reachable bool) {
	if reachable || n.Labels == nil || n.Labels[LabelNode] == "" {
		n.Labels = NodeLabels(n.Labels, f)
	}
	if reachable || n.Status.Capacity == nil {
		n.Status.Capacity = capacity(f)
		n.Status.Allocatable = capacity(f)
	}
	n.Status.Phase = corev1.NodeRunning
	n.Status.Conditions = NodeConditions(n.Status.Conditions, reachable)
	p.node.ready = reachable
}

// capacity is the node's: pods from sandboxd's bounds, cpu and memory
// the machine's.
func capacity(f Facts) corev1.ResourceList {
	pods := int64(defaultMaxPods)
	if f.MaxSandboxes > 0 {
		pods = int64(f.MaxSandboxes)
	}
	rl := corev1.ResourceList{
		corev1.ResourcePods: *resource.NewQuantity(pods, resource.DecimalSI),
		corev1.ResourceCPU:  *resource.NewQuantity(int64(runtime.NumCPU()), resource.DecimalSI),
	}
	var si syscall.Sysinfo_t
	if syscall.Sysinfo(&si) == nil {
		rl[corev1.ResourceMemory] = *resource.NewQuantity(int64(si.Totalram)*int64(si.Unit), resource.BinarySI)
	}
	return rl
}

// NodeConditions are the node's conditions, Ready as sandboxd answers;
// a condition's transition time moves only when its status does.
func NodeConditions(old []corev1.NodeCondition, reachable bool) []corev1.NodeCondition {
	now := metav1.Now()
	prev := map[corev1.NodeConditionType]corev1.NodeCondition{}
	for _, c := range old {
		prev[c.Type] = c
	}
	cond := func(t corev1.NodeConditionType, s corev1.ConditionStatus, reason, msg string) corev1.NodeCondition {
		c := corev1.NodeCondition{Type: t, Status: s, Reason: reason, Message: msg, LastHeartbeatTime: now, LastTransitionTime: now}
		if o, ok := prev[t]; ok && o.Status == s && !o.LastTransitionTime.IsZero() {
			c.LastTransitionTime = o.LastTransitionTime
		}
		return c
	}
	ready := cond(corev1.NodeReady, corev1.ConditionTrue, "KubeletReady", "sandboxd answers on the bus")
	if !reachable {
		ready = cond(corev1.NodeReady, corev1.ConditionFalse, ReasonSandboxdUnreachable, "sandboxd does not answer on the bus")
	}
	return []corev1.NodeCondition{
		ready,
		cond(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory", "sandboxd bounds its sandboxes' memory"),
		cond(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure", "sandboxd bounds its sandboxes' disk"),
		cond(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID", "sandboxd bounds its sandboxes' tasks"),
		cond(corev1.NodeNetworkUnavailable, corev1.ConditionFalse, "RouteCreated", "a sandbox's ports are exposed on the host"),
	}
}

// facts asks sandboxd for the projects, its bounds and (once) whether
// its sandboxes get a user namespace.
func (p *Provider) facts(ctx context.Context) (Facts, error) {
	var f Facts
	c, err := p.client(ctx)
	if err != nil {
		return f, err
	}
	cctx, cancel := p.callCtx(ctx)
	defer cancel()
	projects, err := c.Projects(cctx)
	if err != nil {
		return f, err
	}
	for _, pr := range projects {
		if p.cfg.Projects == nil || slices.Contains(p.cfg.Projects, pr.Name) {
			f.Projects = append(f.Projects, pr)
		}
	}
	if b, err := c.Bounds(cctx); err == nil {
		for _, m := range []uint64{b.AllSandboxesMax, b.SandboxesMax} {
			if m > 0 && (f.MaxSandboxes == 0 || m < f.MaxSandboxes) {
				f.MaxSandboxes = m
			}
		}
	}
	p.node.mu.Lock()
	f.Idmap = p.node.idmap
	p.node.mu.Unlock()
	if f.Idmap == "" {
		if list, err := c.List(cctx); err == nil && len(list) > 0 {
			p.learnIdmap(cctx, c.Handle(list[len(list)-1]))
			p.node.mu.Lock()
			f.Idmap = p.node.idmap
			p.node.mu.Unlock()
		}
	}
	return f, nil
}

// learnIdmap learns from a sandbox whether the host gives sandboxes a
// user namespace (its HostIDs), once.
func (p *Provider) learnIdmap(ctx context.Context, sb *client.Sandbox) {
	p.node.mu.Lock()
	known := p.node.idmap != ""
	p.node.mu.Unlock()
	if known {
		return
	}
	st, err := sb.Status(ctx)
	if err != nil {
		return
	}
	v := "false"
	if len(st.HostIDs) > 0 {
		v = "true"
	}
	p.node.mu.Lock()
	p.node.idmap = v
	p.node.mu.Unlock()
}

// probeNode asks sandboxd and tells virtual-kubelet the node's status
// when its readiness, labels or capacity changed.
func (p *Provider) probeNode(ctx context.Context) {
	facts, err := p.facts(ctx)
	if err != nil {
		p.log.Debug("sandboxd does not answer", "error", err)
	}
	p.node.mu.Lock()
	if p.node.node == nil {
		p.node.mu.Unlock()
		return
	}
	n := p.node.node.DeepCopy()
	wasReady := p.node.ready
	oldLabels, oldCap := maps.Clone(n.Labels), n.Status.Capacity.DeepCopy()
	p.applyFacts(n, facts, err == nil)
	changed := wasReady != p.node.ready || !maps.Equal(oldLabels, n.Labels) || !equalResources(oldCap, n.Status.Capacity)
	if changed {
		p.node.node = n
	}
	cb := p.node.cb
	p.node.mu.Unlock()
	if changed {
		if err != nil {
			p.log.Warn("sandboxd does not answer: the node is NotReady", "error", err)
		} else {
			p.log.Info("the node is Ready", "projects", len(facts.Projects))
		}
		if cb != nil {
			cb(n.DeepCopy())
		}
	}
}

func equalResources(a, b corev1.ResourceList) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || v.Cmp(w) != 0 {
			return false
		}
	}
	return true
}

// Ping is virtual-kubelet's heartbeat of the provider: the kubelet is
// alive whether or not sandboxd answers (a failed ping would stop the
// node's status updates, and NotReady could not be told).
func (p *Provider) Ping(ctx context.Context) error { return ctx.Err() }

// NotifyNodeStatus registers virtual-kubelet's callback for the node's
// status changes.
func (p *Provider) NotifyNodeStatus(ctx context.Context, cb func(*corev1.Node)) {
	p.node.mu.Lock()
	p.node.cb = cb
	p.node.mu.Unlock()
}
