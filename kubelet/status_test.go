package kubelet

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/sandboxd/sandboxd/sandboxd1"
)

func condition(st corev1.PodStatus, t corev1.PodConditionType) corev1.ConditionStatus {
	for _, c := range st.Conditions {
		if c.Type == t {
			return c.Status
		}
	}
	return ""
}

func TestPodStatus(t *testing.T) {
	p := pod(corev1.Container{Name: "main", Image: "sandboxd.io/project/web"})
	p.Status.QOSClass = corev1.PodQOSGuaranteed
	now := time.Now()
	running := &sandboxd1.ProcessEntry{ID: "p1", Started: uint64(now.UnixMicro())}
	cases := []struct {
		name  string
		obs   Observed
		phase corev1.PodPhase
		ready bool
		state string // running, waiting, terminated
		code  int32
	}{
		{"creating", Observed{}, corev1.PodPending, false, "waiting", 0},
		{"made, no command", Observed{SandboxID: "7a28fd100edf", State: sandboxd1.StateReady, Started: now}, corev1.PodRunning, true, "running", 0},
		{"frozen", Observed{SandboxID: "7a28fd100edf", State: sandboxd1.StateFrozen, Started: now}, corev1.PodRunning, true, "running", 0},
		{"command not yet spawned", Observed{SandboxID: "7a28fd100edf", State: sandboxd1.StateReady, Command: true}, corev1.PodPending, false, "waiting", 0},
		{"command runs", Observed{SandboxID: "7a28fd100edf", State: sandboxd1.StateRunning, Command: true, Process: running}, corev1.PodRunning, true, "running", 0},
		{"command exited 0", Observed{SandboxID: "7a28fd100edf", State: sandboxd1.StateReady, Command: true,
			Process: &sandboxd1.ProcessEntry{ID: "p1", Started: 1, Ended: 2, How: "exited"}}, corev1.PodSucceeded, false, "terminated", 0},
		{"command exited 3", Observed{SandboxID: "7a28fd100edf", State: sandboxd1.StateReady, Command: true,
			Process: &sandboxd1.ProcessEntry{ID: "p1", Started: 1, Ended: 2, How: "exited", Status: 3}}, corev1.PodFailed, false, "terminated", 3},
		{"stopped", Observed{SandboxID: "7a28fd100edf", State: sandboxd1.StateStopped}, corev1.PodRunning, false, "waiting", 0},
		{"gone", Observed{SandboxID: "7a28fd100edf", State: sandboxd1.StateReady, Gone: true}, corev1.PodFailed, false, "terminated", 137},
		{"failed", Observed{Failed: `creating a sandbox of project "web": no such project`}, corev1.PodFailed, false, "terminated", 1},
	}
	for _, tc := range cases {
		st := PodStatus(p, tc.obs, "127.0.0.1")
		if st.Phase != tc.phase {
			t.Errorf("%s: phase %s; want %s", tc.name, st.Phase, tc.phase)
		}
		want := corev1.ConditionFalse
		if tc.ready {
			want = corev1.ConditionTrue
		}
		if condition(st, corev1.PodReady) != want || st.ContainerStatuses[0].Ready != tc.ready {
			t.Errorf("%s: Ready %s, container ready %v; want %v", tc.name, condition(st, corev1.PodReady), st.ContainerStatuses[0].Ready, tc.ready)
		}
		cs := st.ContainerStatuses[0].State
		got := map[bool]string{cs.Running != nil: "running", cs.Waiting != nil: "waiting", cs.Terminated != nil: "terminated"}[true]
		if got != tc.state {
			t.Errorf("%s: container %s; want %s", tc.name, got, tc.state)
		}
		if cs.Terminated != nil && cs.Terminated.ExitCode != tc.code {
			t.Errorf("%s: exit code %d; want %d", tc.name, cs.Terminated.ExitCode, tc.code)
		}
		if tc.obs.SandboxID != "" && st.ContainerStatuses[0].ContainerID != "sandboxd://"+tc.obs.SandboxID {
			t.Errorf("%s: containerID %q", tc.name, st.ContainerStatuses[0].ContainerID)
		}
		if st.QOSClass != corev1.PodQOSGuaranteed {
			t.Errorf("%s: qosClass %q, which the apiserver does not let a status change", tc.name, st.QOSClass)
		}
		if st.PodIP != "127.0.0.1" || st.HostIP != "127.0.0.1" {
			t.Errorf("%s: podIP %q hostIP %q", tc.name, st.PodIP, st.HostIP)
		}
	}
	st := PodStatus(p, cases[len(cases)-1].obs, "127.0.0.1")
	if st.Reason != ReasonProviderFailed || st.Message == "" {
		t.Errorf("a failed create: reason %q, message %q", st.Reason, st.Message)
	}
}

func TestNodeLabelsAndConditions(t *testing.T) {
	f := Facts{Projects: []sandboxd1.ProjectEntry{{Name: "web", Location: "/srv/pool/projects/web"}, {Name: "api", Location: "/srv/api"}}, Idmap: "true"}
	l := NodeLabels(map[string]string{"kubernetes.io/hostname": "h1", "kubernetes.io/role": "agent", LabelProject + "old": "true"}, f)
	for k, v := range map[string]string{"type": "virtual-kubelet", "kubernetes.io/os": "linux", LabelNode: "true",
		LabelProject + "web": "true", LabelProject + "api": "true", LabelPool: "btrfs", LabelIdmap: "true", "kubernetes.io/hostname": "h1"} {
		if l[k] != v {
			t.Errorf("label %s = %q; want %q", k, l[k], v)
		}
	}
	if _, ok := l[LabelProject+"old"]; ok {
		t.Error("a project gone keeps its label")
	}
	if _, ok := l["kubernetes.io/role"]; ok {
		t.Error("kubernetes.io/role, which NodeRestriction refuses a node, is kept")
	}
	if (Facts{Projects: []sandboxd1.ProjectEntry{{Name: "x", Location: "tank/sandboxd/x"}}}).Pool() != "zfs" {
		t.Error("a dataset is not zfs")
	}
	if _, ok := NodeLabels(nil, Facts{})[LabelIdmap]; ok {
		t.Error("idmap labelled before any sandbox told")
	}

	up := NodeConditions(nil, true)
	down := NodeConditions(up, false)
	if up[0].Type != corev1.NodeReady || up[0].Status != corev1.ConditionTrue {
		t.Errorf("reachable: %+v", up[0])
	}
	if down[0].Status != corev1.ConditionFalse || down[0].Reason != ReasonSandboxdUnreachable {
		t.Errorf("unreachable: %+v", down[0])
	}
	again := NodeConditions(down, false)
	if !again[0].LastTransitionTime.Equal(&down[0].LastTransitionTime) {
		t.Error("the transition time moved without a transition")
	}
}
