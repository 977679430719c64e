package kubelet

import (
	"fmt"
	"math"

	corev1 "k8s.io/api/core/v1"

	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/sandboxd1"
)

// Annotations a pod may carry for what the pod model has no field for.
const (
	// AnnotationSandboxID is set by the node on a pod once its sandbox
	// is made (with the pod's status): the sandbox's id, for sandboxctl
	// and the D-Bus API on the node (promotion, checkpoints, fork).
	AnnotationSandboxID = "sandboxd.io/sandbox-id"
	// AnnotationProfile picks the sandbox's profile (default, untrusted,
	// trusted, or one of sandboxd.toml's).
	AnnotationProfile = "sandboxd.io/profile"
	// AnnotationNetwork picks its network: none, allowlist or host (the
	// profile's when absent).
	AnnotationNetwork = "sandboxd.io/network"
)

// Plan is a pod as a sandbox: what to create, then what to spawn in it.
type Plan struct {
	// Project is the project the image names.
	Project string
	// Create are the sandbox's options; Create.Name is SandboxName's.
	Create client.CreateOptions
	// Argv is the container's command and args, a background process
	// (Spawn, with Restart, so that it runs again when the sandbox
	// starts again); none: the sandbox alone.
	Argv []string
	// Spawn are the process's options: its environment and directory.
	Spawn client.ExecOptions
	// Ports are the container's ports, exposed on the host (ExposePort).
	Ports []uint16
}

// PlanPod maps a pod onto a sandbox, or says why it cannot be one. The
// pod's environment has been resolved by virtual-kubelet (valueFrom,
// envFrom) before it comes here.
func PlanPod(pod *corev1.Pod) (Plan, error) {
	spec := &pod.Spec
	switch {
	case len(spec.InitContainers) > 0:
		return Plan{}, fmt.Errorf("init container %q: %w", spec.InitContainers[0].Name, ErrPodShape)
	case len(spec.EphemeralContainers) > 0:
		return Plan{}, fmt.Errorf("ephemeral container %q: %w", spec.EphemeralContainers[0].Name, ErrPodShape)
	case len(spec.Containers) != 1:
		return Plan{}, fmt.Errorf("%d containers: %w", len(spec.Containers), ErrPodShape)
	}
	c := &spec.Containers[0]
	if err := security(spec, c); err != nil {
		return Plan{}, err
	}
	project, err := ParseImage(c.Image)
	if err != nil {
		return Plan{}, fmt.Errorf("container %q: %w", c.Name, err)
	}
	p := Plan{Project: project}
	p.Create.Name = SandboxName(pod.Namespace, pod.Name, pod.UID)
	p.Create.Profile = pod.Annotations[AnnotationProfile]
	switch n := pod.Annotations[AnnotationNetwork]; n {
	case "", client.NetworkNone, client.NetworkAllowlist, client.NetworkHost:
		p.Create.Network = n
	default:
		return Plan{}, fmt.Errorf("annotation %s=%q: want none, allowlist or host: %w", AnnotationNetwork, n, ErrPodSpec)
	}
	if err := limits(c, &p.Create); err != nil {
		return Plan{}, fmt.Errorf("container %q: %w", c.Name, err)
	}
	p.Argv = append(append([]string(nil), c.Command...), c.Args...)
	if len(p.Argv) == 0 {
		p.Argv = nil
	}
	for _, e := range c.Env {
		if e.ValueFrom != nil {
			return Plan{}, fmt.Errorf("container %q: env %s: a valueFrom left unresolved: %w", c.Name, e.Name, ErrPodSpec)
		}
		p.Spawn.Env = append(p.Spawn.Env, e.Name+"="+e.Value)
	}
	p.Spawn.Dir = c.WorkingDir
	p.Spawn.Restart = true
	// Without a command the environment has no process to go to (a
	// sandbox has none of its own; kubectl exec's commands get the
	// daemon's): it is not refused, since virtual-kubelet adds the
	// services' variables to every pod that does not turn enableServiceLinks off.
	for _, port := range c.Ports {
		if port.Protocol != "" && port.Protocol != corev1.ProtocolTCP {
			return Plan{}, fmt.Errorf("container %q: port %d/%s: only TCP ports are exposed: %w", c.Name, port.ContainerPort, port.Protocol, ErrPodSpec)
		}
		if port.ContainerPort < 1 || port.ContainerPort > math.MaxUint16 {
			return Plan{}, fmt.Errorf("container %q: port %d: %w", c.Name, port.ContainerPort, ErrPodSpec)
		}
		p.Ports = append(p.Ports, uint16(port.ContainerPort))
	}
	return p, nil
}

// security refuses what a pod asks of the host, or of its process's
// identity, that a sandbox does not give: left out in silence, the pod
// would run with another reach than its author (and the cluster's pod
// security policy, which sees these fields) expects. What a sandbox
// gives of itself is not refused: no capability, no_new_privs, a
// seccomp filter (capabilities.drop, allowPrivilegeEscalation: false,
// a seccompProfile), nor volumes the apiserver adds (a service
// account's token): a sandbox mounts none, it sees its project.
func security(spec *corev1.PodSpec, c *corev1.Container) error {
	refuse := func(field, why string) error {
		return fmt.Errorf("%s: %s: %w", field, why, ErrPodSpec)
	}
	switch {
	case spec.HostNetwork:
		return refuse("hostNetwork", "a pod's sandbox has a network of its own (annotation "+AnnotationNetwork+")")
	case spec.HostPID:
		return refuse("hostPID", "a pod's sandbox sees its own processes, not the host's")
	case spec.HostIPC:
		return refuse("hostIPC", "a pod's sandbox has an IPC namespace of its own")
	}
	for _, v := range spec.Volumes {
		if v.HostPath != nil {
			return refuse(fmt.Sprintf("volume %q", v.Name), "hostPath: a pod's sandbox sees its project, no path of the host's")
		}
	}
	// The process runs as the sandbox's root (the kubelet's user), with
	// no capability.
	user := func(where string, uid, gid *int64, nonRoot *bool) error {
		switch {
		case uid != nil && *uid != 0:
			return refuse(where+"runAsUser", fmt.Sprintf("%d: a pod's process runs as its sandbox's root, uid 0 without capabilities", *uid))
		case gid != nil && *gid != 0:
			return refuse(where+"runAsGroup", fmt.Sprintf("%d: a pod's process runs as its sandbox's root, gid 0", *gid))
		case nonRoot != nil && *nonRoot:
			return refuse(where+"runAsNonRoot", "a pod's process runs as its sandbox's root, uid 0 without capabilities")
		}
		return nil
	}
	if sc := spec.SecurityContext; sc != nil {
		if err := user("securityContext.", sc.RunAsUser, sc.RunAsGroup, sc.RunAsNonRoot); err != nil {
			return err
		}
	}
	if sc := c.SecurityContext; sc != nil {
		where := fmt.Sprintf("container %q: securityContext.", c.Name)
		switch {
		case sc.Privileged != nil && *sc.Privileged:
			return refuse(where+"privileged", "a pod's sandbox is never privileged")
		case sc.Capabilities != nil && len(sc.Capabilities.Add) > 0:
			return refuse(where+"capabilities.add", fmt.Sprintf("%v: a pod's process has no capability", sc.Capabilities.Add))
		case sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem:
			return refuse(where+"readOnlyRootFilesystem", "a pod's sandbox may write its own copy of the host's files and of its project")
		}
		if err := user(where, sc.RunAsUser, sc.RunAsGroup, sc.RunAsNonRoot); err != nil {
			return err
		}
	}
	return nil
}

// limits puts the container's resource limits on the sandbox: cpu as a
// CPU quota (whole percents of one CPU, rounded up), memory as its
// MemoryMax, ephemeral-storage as its disk quota. Requests are the
// scheduler's and are not set on the sandbox.
func limits(c *corev1.Container, o *client.CreateOptions) error {
	for name, q := range c.Resources.Limits {
		switch name {
		case corev1.ResourceCPU:
			pct := (q.MilliValue() + 9) / 10
			if pct < 1 {
				return fmt.Errorf("cpu limit %s: %w", q.String(), ErrPodSpec)
			}
			o.CPUQuota = sandboxd1.CPUQuota(pct)
		case corev1.ResourceMemory:
			if q.Value() < int64(sandboxd1.MinMemoryMax) {
				return fmt.Errorf("memory limit %s: a sandbox needs at least %d MiB: %w", q.String(), sandboxd1.MinMemoryMax>>20, ErrPodSpec)
			}
			o.MemoryMax = sandboxd1.Size(q.Value())
		case corev1.ResourceEphemeralStorage:
			if q.Value() <= 0 {
				return fmt.Errorf("ephemeral-storage limit %s: %w", q.String(), ErrPodSpec)
			}
			o.DiskQuota = sandboxd1.Size(q.Value())
		default:
			return fmt.Errorf("limit of %s: a sandbox has cpu, memory and ephemeral-storage limits: %w", name, ErrPodSpec)
		}
	}
	return nil
}

// AnnotationPorts is set by the node beside AnnotationSandboxID: each
// container port exposed on the host, "port=address" joined by ",";
// the address is a loopback TCP port only the sandbox's owner (the
// kubelet's user) and root may connect to.
const AnnotationPorts = "sandboxd.io/ports"
