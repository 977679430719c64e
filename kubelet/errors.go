package kubelet

import "errors"

// Sentinels of the pods this node refuses; wrapped with what was found.
var (
	// ErrImage: a container's image is not of the sandboxd.io/project/
	// scheme.
	ErrImage = errors.New("the image does not name a sandboxd project (want " + ImagePrefix + "<project>)")
	// ErrPodShape: the pod is not one container (no init containers, no
	// second container, no ephemeral container).
	ErrPodShape = errors.New("a pod on a sandboxd node is one container, its sandbox")
	// ErrPodSpec: a field of the pod that has no meaning for a sandbox,
	// or a value out of a sandbox's bounds.
	ErrPodSpec = errors.New("the pod asks what a sandbox cannot be")
	// ErrProject: the image names a project the node does not
	// advertise (--projects).
	ErrProject = errors.New("the project is not one this node advertises")
	// ErrHostNetwork: the pod's sandbox would have the host's network,
	// which the node does not allow (--allow-host-network).
	ErrHostNetwork = errors.New("the host's network is not for this node's pods (sandboxd-kubelet --allow-host-network allows it)")
	// ErrNotOwned: a sandbox of a pod's name that another user made.
	ErrNotOwned = errors.New("the sandbox is not the kubelet's own")
	// ErrNoSuchPod: the node runs no pod of that namespace and name.
	ErrNoSuchPod = errors.New("no such pod on this node")
)

// Reasons in a pod's status.
const (
	// ReasonProviderFailed: the pod could not be made a sandbox (the
	// message says why); virtual-kubelet's own word for it.
	ReasonProviderFailed = "ProviderFailed"
	// ReasonSandboxGone: the pod's sandbox is no more (destroyed on the
	// host, its time to live ended).
	ReasonSandboxGone = "SandboxGone"
	// ReasonSandboxStopped: the sandbox is stopped (sandboxctl stop).
	ReasonSandboxStopped = "SandboxStopped"
	// ReasonCreating: the sandbox is being made.
	ReasonCreating = "ContainerCreating"
	// ReasonSandboxdUnreachable: the node's Ready condition while
	// sandboxd does not answer on the bus.
	ReasonSandboxdUnreachable = "SandboxdUnreachable"
)
