package kubelet

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandboxd/sandboxd/sandboxd1"
)

// Observed is what the node knows of a pod's sandbox, from which its
// status is made.
type Observed struct {
	// SandboxID is the sandbox's id; "" before it is made.
	SandboxID string
	// State is the sandbox's (sandboxd1.State*); "" before it is made.
	State string
	// Gone: the sandbox was made and is no more.
	Gone bool
	// Failed says why the pod could not be made a sandbox.
	Failed string
	// Command: the pod has a command, a background process; Process is
	// its entry once spawned (Ended 0 while it runs).
	Command bool
	Process *sandboxd1.ProcessEntry
	// Started is when the sandbox was made.
	Started time.Time
}

// ContainerID is a sandbox's id as a container's containerID.
func ContainerID(sandboxID string) string { return "sandboxd://" + sandboxID }

// readyStates are the sandbox's states in which its pod is Ready: it
// runs, or is frozen for being idle or for a moment (the next call
// thaws it), or is being promoted.
var readyStates = map[string]bool{
	sandboxd1.StateReady:     true,
	sandboxd1.StateRunning:   true,
	sandboxd1.StateFrozen:    true,
	sandboxd1.StatePromoting: true,
}

// PodStatus is pod's status as its sandbox stands; hostIP is the node's
// IP, which is also the pod's (a sandbox has no address of its own that
// the cluster can reach; its ports are exposed on the host).
func PodStatus(pod *corev1.Pod, o Observed, hostIP string) corev1.PodStatus {
	st := corev1.PodStatus{
		Phase:   corev1.PodPending,
		HostIP:  hostIP,
		PodIP:   hostIP,
		HostIPs: []corev1.HostIP{{IP: hostIP}},
		PodIPs:  []corev1.PodIP{{IP: hostIP}},
		// The apiserver set it at the pod's creation, and refuses a
		// status that changes it.
		QOSClass: pod.Status.QOSClass,
	}
	if pod.Status.StartTime != nil {
		st.StartTime = pod.Status.StartTime
	} else if !o.Started.IsZero() {
		t := metav1.NewTime(o.Started)
		st.StartTime = &t
	}
	started := metav1.NewTime(o.Started)
	cs := corev1.ContainerStatus{State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: ReasonCreating}}}
	if len(pod.Spec.Containers) > 0 {
		cs.Name, cs.Image = pod.Spec.Containers[0].Name, pod.Spec.Containers[0].Image
	}
	if o.SandboxID != "" {
		cs.ContainerID = ContainerID(o.SandboxID)
	}
	ready := false
	switch {
	case o.Failed != "":
		st.Phase, st.Reason, st.Message = corev1.PodFailed, ReasonProviderFailed, o.Failed
		cs.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: ReasonProviderFailed, Message: o.Failed}}
	case o.Gone:
		st.Phase, st.Reason = corev1.PodFailed, ReasonSandboxGone
		st.Message = fmt.Sprintf("sandbox %s is no more on this host", o.SandboxID)
		cs.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: ReasonSandboxGone, StartedAt: started}}
	case o.State == "" || o.State == sandboxd1.StateCreating:
		// Pending, waiting: the sandbox is being made.
	case o.State == sandboxd1.StateStopped:
		st.Phase = corev1.PodRunning
		cs.State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: ReasonSandboxStopped,
			Message: "the sandbox is stopped; sandboxctl start " + o.SandboxID + " on the node starts it again"}}
	case o.Command && o.Process == nil:
		// Made; its process not yet spawned.
		st.Phase = corev1.PodPending
	case o.Command && o.Process.Ended != 0:
		code := o.Process.Status
		term := &corev1.ContainerStateTerminated{ExitCode: code, Signal: o.Process.Signal, Reason: o.Process.How,
			StartedAt: metav1.NewTime(time.UnixMicro(int64(o.Process.Started))), FinishedAt: metav1.NewTime(time.UnixMicro(int64(o.Process.Ended)))}
		if code == 0 {
			st.Phase, term.Reason = corev1.PodSucceeded, "Completed"
		} else {
			st.Phase, term.Reason = corev1.PodFailed, "Error"
		}
		cs.ContainerID = ContainerID(o.SandboxID)
		cs.State = corev1.ContainerState{Terminated: term}
	case readyStates[o.State]:
		st.Phase = corev1.PodRunning
		at := started
		if o.Process != nil {
			at = metav1.NewTime(time.UnixMicro(int64(o.Process.Started)))
		}
		cs.State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: at}}
		ready = true
	default: // destroying
		st.Phase = corev1.PodRunning
		cs.State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}}
	}
	cs.Ready = ready
	running := cs.State.Running != nil
	cs.Started = &running
	st.ContainerStatuses = []corev1.ContainerStatus{cs}
	st.Conditions = conditions(st.Phase, ready, o)
	return st
}

// conditions are the pod's conditions for its phase and readiness.
func conditions(phase corev1.PodPhase, ready bool, o Observed) []corev1.PodCondition {
	made := o.SandboxID != ""
	cond := func(t corev1.PodConditionType, ok bool) corev1.PodCondition {
		c := corev1.PodCondition{Type: t, Status: corev1.ConditionFalse}
		if ok {
			c.Status = corev1.ConditionTrue
		}
		if !o.Started.IsZero() {
			c.LastTransitionTime = metav1.NewTime(o.Started)
		}
		return c
	}
	return []corev1.PodCondition{
		cond(corev1.PodScheduled, true),
		cond(corev1.PodInitialized, true),
		cond(corev1.PodReadyToStartContainers, made && phase != corev1.PodFailed),
		cond(corev1.ContainersReady, ready),
		cond(corev1.PodReady, ready),
	}
}
