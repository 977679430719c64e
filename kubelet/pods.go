package kubelet

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/sandboxd1"
)

// podEntry is a pod the node runs and what it knows of its sandbox.
type podEntry struct {
	mu      sync.Mutex
	pod     *corev1.Pod
	plan    Plan
	obs     Observed
	process string        // the background process's id
	ports   []string      // "port=address" of its exposed ports
	made    chan struct{} // closed once the create ended, made or not
	deleted bool          // DeletePod came: the create destroys what it made
}

// CreatePod makes pod's sandbox in the background: the pod is Pending
// until it is made and its process runs. A pod that cannot be a sandbox
// fails at once, reason ProviderFailed, the refusal its message (as an
// error virtual-kubelet would keep it Pending and try again, which
// cannot help).
func (p *Provider) CreatePod(ctx context.Context, pod *corev1.Pod) error {
	plan, err := PlanPod(pod)
	if err == nil {
		err = p.advertised(plan.Project)
	}
	if err == nil && plan.Create.Network == client.NetworkHost && !p.cfg.AllowHostNetwork {
		err = fmt.Errorf("annotation %s=host: %w", AnnotationNetwork, ErrHostNetwork)
	}
	key := podKey(pod.Namespace, pod.Name)
	e := &podEntry{pod: pod.DeepCopy(), plan: plan, obs: Observed{Command: plan.Argv != nil}, made: make(chan struct{})}
	if err != nil {
		p.log.Warn("a pod refused", "pod", key, "error", err)
		e.obs.Failed = err.Error()
		close(e.made)
	}
	p.mu.Lock()
	if old, ok := p.pods[key]; ok && old.pod.UID == pod.UID {
		p.mu.Unlock()
		return nil
	}
	p.pods[key] = e
	p.mu.Unlock()
	p.notify(e)
	if err == nil {
		go p.create(context.WithoutCancel(ctx), e)
	}
	return nil
}

// advertised refuses a project the node does not advertise: --projects
// names the only ones its pods may use (root may use every project,
// root-only ones too); without it, every project root may use.
func (p *Provider) advertised(project string) error {
	if p.cfg.Projects == nil || slices.Contains(p.cfg.Projects, project) {
		return nil
	}
	return fmt.Errorf("project %q: this node runs pods of projects %s only: %w", project, strings.Join(p.cfg.Projects, ", "), ErrProject)
}

// create makes e's sandbox, or finds it (a pod's sandbox has a name of
// its own: a restarted kubelet finds it, ErrExists), then exposes its
// ports and spawns its process unless it runs already.
func (p *Provider) create(ctx context.Context, e *podEntry) {
	defer close(e.made)
	p.creates <- struct{}{}
	defer func() { <-p.creates }()
	sb, err := p.makeSandbox(ctx, e.plan)
	if err != nil {
		p.log.Warn("a pod's sandbox could not be made", "pod", podKey(e.pod.Namespace, e.pod.Name), "error", err)
		e.mu.Lock()
		e.obs.Failed = err.Error()
		e.mu.Unlock()
		p.notify(e)
		return
	}
	if err := p.checkNetwork(ctx, sb); err != nil {
		p.log.Warn("a pod's sandbox has the host's network: destroyed", "pod", podKey(e.pod.Namespace, e.pod.Name), "sandbox", sb.ID(), "error", err)
		if derr := sb.Destroy(ctx); derr != nil && !errors.Is(derr, client.ErrNoSuchSandbox) {
			p.log.Warn("destroying a pod's sandbox", "sandbox", sb.ID(), "error", derr)
		}
		e.mu.Lock()
		e.obs.Failed = err.Error()
		e.mu.Unlock()
		p.notify(e)
		return
	}
	e.mu.Lock()
	e.obs.SandboxID, e.obs.State, e.obs.Started = sb.ID(), sandboxd1.StateReady, time.Now()
	deleted := e.deleted
	e.mu.Unlock()
	if deleted {
		return // DeletePod waits on made and destroys it
	}
	p.notify(e)
	p.learnIdmap(ctx, sb)
	var ports []string
	for _, port := range e.plan.Ports {
		addr, err := sb.ExposePort(ctx, port, client.ExposeOptions{TCP: true})
		switch {
		case errors.Is(err, client.ErrExists):
		case err != nil:
			p.log.Warn("a pod's port could not be exposed", "pod", podKey(e.pod.Namespace, e.pod.Name), "port", port, "error", err)
		default:
			ports = append(ports, fmt.Sprintf("%d=%s", port, addr))
		}
	}
	e.mu.Lock()
	e.ports = ports
	e.mu.Unlock()
	if e.plan.Argv != nil {
		proc, err := p.ensureProcess(ctx, sb, e.plan)
		e.mu.Lock()
		if err != nil {
			e.obs.Failed = fmt.Sprintf("sandbox %s is made, its command could not start: %v", sb.ID(), err)
		} else {
			e.process, e.obs.Process = proc.ID, &proc
		}
		e.mu.Unlock()
	}
	p.notify(e)
}

// makeSandbox creates plan's sandbox, trying again a while when the host
// is busy or full, and finds it when it exists already.
func (p *Provider) makeSandbox(ctx context.Context, plan Plan) (*client.Sandbox, error) {
	pause := time.Second
	for attempt := 0; ; attempt++ {
		c, err := p.client(ctx)
		if err == nil {
			// Found first: a full host refuses a create before it
			// looks at the name.
			var sb *client.Sandbox
			if sb, err = c.Sandbox(ctx, plan.Create.Name); err == nil {
				return p.own(sb)
			}
			if errors.Is(err, client.ErrNoSuchSandbox) {
				sb, err = c.Create(ctx, plan.Project, plan.Create)
				if errors.Is(err, client.ErrExists) {
					if sb, err = c.Sandbox(ctx, plan.Create.Name); err != nil {
						return nil, err
					}
					return p.own(sb)
				}
				if err == nil {
					return sb, nil
				}
			}
		}
		if !transient(err) || attempt == 5 {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(pause):
		}
		pause *= 2
	}
}

// checkNetwork refuses sb when it has the host's network and the node
// does not allow it: a profile (the annotation's, the host's default)
// may give it without the pod's network annotation saying so.
func (p *Provider) checkNetwork(ctx context.Context, sb *client.Sandbox) error {
	if p.cfg.AllowHostNetwork {
		return nil
	}
	st, err := sb.Status(ctx)
	if err != nil {
		return fmt.Errorf("sandbox %s: its network: %w", sb.ID(), err)
	}
	if st.Network == client.NetworkHost {
		return fmt.Errorf("sandbox %s (profile %q): %w", sb.ID(), st.Profile, ErrHostNetwork)
	}
	return nil
}

// own returns sb, found by its name, if the kubelet's user made it: root
// finds every owner's sandboxes, and a local user may name one of its
// own k8s_... first; that one is not the pod's, and the pod fails.
func (p *Provider) own(sb *client.Sandbox) (*client.Sandbox, error) {
	if e := sb.Entry(); e.Owner != p.uid {
		return nil, fmt.Errorf("sandbox %s named %s is uid %d's, not this kubelet's (uid %d): %w", e.ID, e.Name, e.Owner, p.uid, ErrNotOwned)
	}
	return sb, nil
}

// ensureProcess returns the process of plan's command in sb: one that
// runs it already (a restarted kubelet's pod), or a new one.
func (p *Provider) ensureProcess(ctx context.Context, sb *client.Sandbox, plan Plan) (sandboxd1.ProcessEntry, error) {
	ps, err := sb.Processes(ctx)
	if err != nil {
		return sandboxd1.ProcessEntry{}, err
	}
	for _, pr := range ps {
		if slices.Equal(pr.Argv, plan.Argv) {
			return pr, nil
		}
	}
	id, err := sb.Spawn(ctx, plan.Argv, plan.Spawn)
	if err != nil {
		return sandboxd1.ProcessEntry{}, err
	}
	if ps, err = sb.Processes(ctx); err == nil {
		for _, pr := range ps {
			if pr.ID == id {
				return pr, nil
			}
		}
	}
	return sandboxd1.ProcessEntry{ID: id, Argv: plan.Argv, Started: uint64(time.Now().UnixMicro())}, nil
}

// UpdatePod takes the pod's new version; what a sandbox could change of
// itself (none of a pod's mutable fields: its image, its
// activeDeadlineSeconds) is left as it was made.
func (p *Provider) UpdatePod(ctx context.Context, pod *corev1.Pod) error {
	p.mu.Lock()
	e, ok := p.pods[podKey(pod.Namespace, pod.Name)]
	p.mu.Unlock()
	if !ok {
		return errNoSuchPod(pod.Namespace, pod.Name)
	}
	e.mu.Lock()
	e.pod = pod.DeepCopy()
	e.mu.Unlock()
	return nil
}

// DeletePod destroys the pod's sandbox, then tells virtual-kubelet the
// pod ended, for it to delete the pod.
func (p *Provider) DeletePod(ctx context.Context, pod *corev1.Pod) error {
	key := podKey(pod.Namespace, pod.Name)
	p.mu.Lock()
	e, ok := p.pods[key]
	p.mu.Unlock()
	id := ""
	if ok {
		e.mu.Lock()
		e.deleted = true
		e.mu.Unlock()
		select {
		case <-e.made:
		case <-ctx.Done():
			return ctx.Err()
		}
		e.mu.Lock()
		id = e.obs.SandboxID
		e.mu.Unlock()
	}
	c, err := p.client(ctx)
	if err != nil {
		return err
	}
	var sb *client.Sandbox
	if id != "" {
		sb = c.Handle(sandboxd1.ListEntry{ID: id})
	} else if sb, err = c.Sandbox(ctx, SandboxName(pod.Namespace, pod.Name, pod.UID)); errors.Is(err, client.ErrNoSuchSandbox) {
		sb, err = nil, nil
	} else if err != nil {
		return err
	} else if _, err := p.own(sb); err != nil {
		p.log.Warn("a deleted pod's sandbox name is another user's sandbox: left alone", "pod", key, "error", err)
		sb = nil
	}
	if sb != nil {
		if err := sb.Destroy(ctx); err != nil && !errors.Is(err, client.ErrNoSuchSandbox) {
			return err
		}
	}
	if !ok {
		return errNoSuchPod(pod.Namespace, pod.Name)
	}
	p.mu.Lock()
	if p.pods[key] == e {
		delete(p.pods, key)
	}
	notify := p.notifyPod
	p.mu.Unlock()
	if notify != nil {
		notify(deletedPod(e))
	}
	return nil
}

// deletedPod is e's pod as it ends: its sandbox destroyed.
func deletedPod(e *podEntry) *corev1.Pod {
	e.mu.Lock()
	defer e.mu.Unlock()
	pod := e.pod.DeepCopy()
	now := metav1.Now()
	pod.Status.Phase = corev1.PodSucceeded
	pod.Status.Reason = "SandboxDestroyed"
	for i := range pod.Status.ContainerStatuses {
		cs := &pod.Status.ContainerStatuses[i]
		started := now
		if cs.State.Running != nil {
			started = cs.State.Running.StartedAt
		}
		cs.Ready = false
		cs.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "SandboxDestroyed", StartedAt: started, FinishedAt: now}}
	}
	for i := range pod.Status.Conditions {
		if t := pod.Status.Conditions[i].Type; t == corev1.PodReady || t == corev1.ContainersReady {
			pod.Status.Conditions[i].Status = corev1.ConditionFalse
		}
	}
	return pod
}

// GetPod is the pod as the node runs it, with its status now.
func (p *Provider) GetPod(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	p.mu.Lock()
	e, ok := p.pods[podKey(namespace, name)]
	p.mu.Unlock()
	if !ok {
		return nil, errNoSuchPod(namespace, name)
	}
	return p.podOf(e), nil
}

// GetPodStatus is the pod's status now.
func (p *Provider) GetPodStatus(ctx context.Context, namespace, name string) (*corev1.PodStatus, error) {
	pod, err := p.GetPod(ctx, namespace, name)
	if err != nil {
		return nil, err
	}
	return &pod.Status, nil
}

// GetPods are the pods the node runs.
func (p *Provider) GetPods(ctx context.Context) ([]*corev1.Pod, error) {
	p.mu.Lock()
	es := make([]*podEntry, 0, len(p.pods))
	for _, e := range p.pods {
		es = append(es, e)
	}
	p.mu.Unlock()
	pods := make([]*corev1.Pod, 0, len(es))
	for _, e := range es {
		pods = append(pods, p.podOf(e))
	}
	return pods, nil
}

// NotifyPods registers virtual-kubelet's callback for pods whose status
// changed.
func (p *Provider) NotifyPods(ctx context.Context, cb func(*corev1.Pod)) {
	p.mu.Lock()
	p.notifyPod = cb
	p.mu.Unlock()
}

// podOf is e's pod with its status as its sandbox stands (a copy).
func (p *Provider) podOf(e *podEntry) *corev1.Pod {
	e.mu.Lock()
	defer e.mu.Unlock()
	pod := e.pod.DeepCopy()
	pod.Status = PodStatus(pod, e.obs, p.cfg.NodeIP)
	// The annotations ride with the status update virtual-kubelet makes
	// (pods/status, which the Node authorizer and NodeRestriction let a
	// node write): no patch of the pod itself, which they refuse. The
	// pod's author may have set them: they say the node's word or none
	// (a script that promotes the sandbox the annotation names would
	// promote one the author chose).
	delete(pod.Annotations, AnnotationSandboxID)
	delete(pod.Annotations, AnnotationPorts)
	if e.obs.SandboxID != "" {
		if pod.Annotations == nil {
			pod.Annotations = map[string]string{}
		}
		pod.Annotations[AnnotationSandboxID] = e.obs.SandboxID
		if len(e.ports) > 0 {
			pod.Annotations[AnnotationPorts] = strings.Join(e.ports, ",")
		}
	}
	return pod
}

// notify tells virtual-kubelet e's pod's status.
func (p *Provider) notify(e *podEntry) {
	p.mu.Lock()
	cb := p.notifyPod
	p.mu.Unlock()
	if cb != nil {
		cb(p.podOf(e))
	}
}

// syncPods follows the pods' sandboxes: a state changed, a process
// ended, a sandbox gone; and destroys the sandboxes of pods that are no
// more (deleted while the kubelet was down, or after their sandbox's
// process ended, when virtual-kubelet does not ask the provider).
func (p *Provider) syncPods(ctx context.Context) {
	c, err := p.client(ctx)
	if err != nil {
		return
	}
	cctx, cancel := p.callCtx(ctx)
	list, err := c.List(cctx)
	cancel()
	if err != nil {
		return
	}
	byID := map[string]sandboxd1.ListEntry{}
	for _, s := range list {
		byID[s.ID] = s
	}
	p.mu.Lock()
	es := make([]*podEntry, 0, len(p.pods))
	for _, e := range p.pods {
		es = append(es, e)
	}
	p.mu.Unlock()
	for _, e := range es {
		if p.forget(e) {
			continue
		}
		p.syncPod(ctx, c, e, byID)
	}
	p.sweep(ctx, c, list)
}

// forget drops e once the apiserver has its pod no more (a pod that
// ended is deleted without a DeletePod); its sandbox, if any, is the
// sweep's.
func (p *Provider) forget(e *podEntry) bool {
	select {
	case <-e.made:
	default:
		return false
	}
	e.mu.Lock()
	ref := PodRef{Namespace: e.pod.Namespace, Name: e.pod.Name, UID: e.pod.UID}
	e.mu.Unlock()
	if p.cfg.Pods == nil || p.podExists(ref) {
		return false
	}
	p.mu.Lock()
	if p.pods[podKey(ref.Namespace, ref.Name)] == e {
		delete(p.pods, podKey(ref.Namespace, ref.Name))
	}
	p.mu.Unlock()
	return true
}

// syncPod brings e's Observed up to date and tells a change.
func (p *Provider) syncPod(ctx context.Context, c *client.Client, e *podEntry, byID map[string]sandboxd1.ListEntry) {
	e.mu.Lock()
	before := PodStatus(e.pod, e.obs, p.cfg.NodeIP)
	id, process, gone := e.obs.SandboxID, e.process, e.obs.Gone
	e.mu.Unlock()
	if id == "" || gone {
		return
	}
	s, ok := byID[id]
	var proc *sandboxd1.ProcessEntry
	if ok && process != "" {
		cctx, cancel := p.callCtx(ctx)
		ps, err := c.Handle(s).Processes(cctx)
		cancel()
		if err == nil {
			for i := range ps {
				if ps[i].ID == process {
					proc = &ps[i]
				}
			}
		}
	}
	e.mu.Lock()
	if !ok {
		e.obs.Gone = true
	} else {
		e.obs.State = s.State
		if proc != nil {
			e.obs.Process = proc
		}
	}
	after := PodStatus(e.pod, e.obs, p.cfg.NodeIP)
	e.mu.Unlock()
	if !apiequality.Semantic.DeepEqual(before, after) {
		p.notify(e)
	}
}

// sweep destroys the sandboxes named for pods (SandboxName), made by the
// kubelet's user, whose pod the apiserver no longer has on this node, or
// has with another uid. Another owner's sandbox is never the kubelet's
// to destroy, whatever its name.
func (p *Provider) sweep(ctx context.Context, c *client.Client, list []sandboxd1.ListEntry) {
	if p.cfg.Pods == nil {
		return
	}
	for _, s := range list {
		ref, ok := ParseSandboxName(s.Name)
		if !ok || s.Owner != p.uid || s.State == sandboxd1.StateCreating || p.podExists(ref) {
			continue
		}
		p.log.Info("destroying the sandbox of a pod that is no more", "sandbox", s.ID, "pod", ref.Namespace+"/"+ref.Name, "uid", ref.UID)
		cctx, cancel := p.callCtx(ctx)
		if err := c.Handle(s).Destroy(cctx); err != nil && !errors.Is(err, client.ErrNoSuchSandbox) {
			p.log.Warn("destroying the sandbox of a pod that is no more", "sandbox", s.ID, "error", err)
		}
		cancel()
	}
}

// podExists says whether the apiserver has ref's pod on this node,
// running or about to.
func (p *Provider) podExists(ref PodRef) bool {
	match := func(pod *corev1.Pod) bool {
		return pod.UID == ref.UID && !(pod.DeletionTimestamp != nil &&
			(pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed))
	}
	if !ref.Cut {
		pod, err := p.cfg.Pods.Pods(ref.Namespace).Get(ref.Name)
		if apierrors.IsNotFound(err) {
			return false
		}
		return err != nil || match(pod)
	}
	pods, err := p.cfg.Pods.Pods(ref.Namespace).List(labels.Everything())
	if err != nil {
		return true
	}
	return slices.ContainsFunc(pods, match)
}
