package kubelet

import (
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/godbus/dbus/v5"
	"github.com/virtual-kubelet/virtual-kubelet/node/api"
	corev1 "k8s.io/api/core/v1"
	corev1listers "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/sandboxd/sandboxd/sandboxd1"
)

// failedStatus is the status the node gives pod once CreatePod took it.
func failedStatus(t *testing.T, p *Provider, pd *corev1.Pod) corev1.PodStatus {
	t.Helper()
	if err := p.CreatePod(context.Background(), pd); err != nil {
		t.Fatal(err)
	}
	got, err := p.GetPod(context.Background(), pd.Namespace, pd.Name)
	if err != nil {
		t.Fatal(err)
	}
	return got.Status
}

func TestCreatePodRefusesAProjectNotAdvertised(t *testing.T) {
	connected := false
	p := New(Config{Projects: []string{"web", "api"}, Connect: noDaemon(&connected)})
	st := failedStatus(t, p, pod(corev1.Container{Name: "main", Image: "sandboxd.io/project/secrets", Command: []string{"cat", "key"}}))
	if st.Phase != corev1.PodFailed || st.Reason != ReasonProviderFailed ||
		!strings.Contains(st.Message, `"secrets"`) || !strings.Contains(st.Message, "web, api") {
		t.Errorf("a pod of a project not advertised: phase %s, reason %s, message %q; want Failed, ProviderFailed, naming web, api", st.Phase, st.Reason, st.Message)
	}
	if connected {
		t.Error("the kubelet called sandboxd for a pod it refuses")
	}
}

// otherUID is a local user's uid, not the kubelet's.
const otherUID = 4242

func TestCreatePodAdoptsNoOtherOwnersSandbox(t *testing.T) {
	pd := pod(corev1.Container{Name: "main", Image: "sandboxd.io/project/web", Command: []string{"sleep", "infinity"}})
	name := SandboxName(pd.Namespace, pd.Name, pd.UID)
	d := &fakeDaemon{t: t, reply: func(c call) ([]any, string) {
		switch c.member {
		case sandboxd1.MethodFindSandbox:
			// A local user made a sandbox of the pod's name first.
			return []any{sandboxd1.ListEntry{ID: "0123456789ab", Name: name, Project: "web", State: sandboxd1.StateReady,
				Owner: otherUID, Object: "/org/sandboxd1/sandbox/0123456789ab"}}, ""
		}
		return nil, sandboxd1.ErrorInvalidArgs
	}}
	p := New(Config{Connect: d.connect})
	p.uid = 0
	got := createdPod(t, p, pd)
	if st := got.Status; st.Phase != corev1.PodFailed || !strings.Contains(st.Message, "uid 4242") || got.Annotations[AnnotationSandboxID] != "" {
		t.Errorf("a pod whose name another user's sandbox has: phase %s, message %q, sandbox %q; want Failed, naming uid 4242, no sandbox",
			st.Phase, st.Message, got.Annotations[AnnotationSandboxID])
	}
	if m := d.members(); !slices.Equal(m, []string{sandboxd1.MethodFindSandbox}) {
		t.Errorf("calls %q; want FindSandbox alone (nothing spawned, exposed or destroyed in another's sandbox)", m)
	}
	// Deleting the pod leaves the other user's sandbox be.
	_ = p.DeletePod(context.Background(), pd)
	if cs := d.called(sandboxd1.MethodDestroy); len(cs) > 0 {
		t.Errorf("DeletePod destroyed %s, another user's sandbox", cs[0].path)
	}
}

func TestDeletePodDestroysNoOtherOwnersSandbox(t *testing.T) {
	pd := pod(corev1.Container{Name: "main", Image: "sandboxd.io/project/web"})
	name := SandboxName(pd.Namespace, pd.Name, pd.UID)
	d := &fakeDaemon{t: t, reply: func(c call) ([]any, string) {
		switch c.member {
		case sandboxd1.MethodFindSandbox:
			return []any{sandboxd1.ListEntry{ID: "0123456789ab", Name: name, Project: "web", State: sandboxd1.StateReady,
				Owner: otherUID, Object: "/org/sandboxd1/sandbox/0123456789ab"}}, ""
		case sandboxd1.MethodDestroy:
			return nil, ""
		}
		return nil, sandboxd1.ErrorInvalidArgs
	}}
	p := New(Config{Connect: d.connect})
	p.uid = 0
	// A pod the kubelet does not run (it restarted): found by name.
	_ = p.DeletePod(context.Background(), pd)
	if cs := d.called(sandboxd1.MethodDestroy); len(cs) > 0 {
		t.Errorf("DeletePod destroyed %s, another user's sandbox", cs[0].path)
	}
}

func TestSweepDestroysOnlyTheKubeletsOwn(t *testing.T) {
	const mine, theirs = "aaaaaaaaaaaa", "bbbbbbbbbbbb"
	d := &fakeDaemon{t: t, reply: func(c call) ([]any, string) {
		switch c.member {
		case sandboxd1.MethodListSandboxes:
			return []any{[]sandboxd1.ListEntry{
				{ID: mine, Name: SandboxName("agents", "gone-1", uid), Project: "web", State: sandboxd1.StateReady, Owner: 0, Object: "/org/sandboxd1/sandbox/" + mine},
				{ID: theirs, Name: SandboxName("agents", "gone-2", uid), Project: "web", State: sandboxd1.StateReady, Owner: otherUID, Object: "/org/sandboxd1/sandbox/" + theirs},
			}}, ""
		case sandboxd1.MethodDestroy:
			return nil, ""
		}
		return nil, sandboxd1.ErrorInvalidArgs
	}}
	p := New(Config{Connect: d.connect, Pods: corev1listers.NewPodLister(cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{}))})
	p.uid = 0
	p.syncPods(context.Background())
	var destroyed []string
	for _, c := range d.called(sandboxd1.MethodDestroy) {
		destroyed = append(destroyed, string(c.path))
	}
	if !slices.Equal(destroyed, []string{"/org/sandboxd1/sandbox/" + mine}) {
		t.Errorf("the sweep destroyed %q; want the kubelet's own %s alone, not uid %d's %s", destroyed, mine, otherUID, theirs)
	}
}

func TestPlanPodRefusesWhatASandboxDoesNotGive(t *testing.T) {
	ok := corev1.Container{Name: "main", Image: "sandboxd.io/project/web", Command: []string{"sleep", "infinity"}}
	yes, uid1000 := true, int64(1000)
	cases := map[string]struct {
		pod  func() *corev1.Pod
		says string
	}{
		"hostNetwork": {func() *corev1.Pod { p := pod(ok); p.Spec.HostNetwork = true; return p }, "hostNetwork"},
		"hostPID":     {func() *corev1.Pod { p := pod(ok); p.Spec.HostPID = true; return p }, "hostPID"},
		"hostIPC":     {func() *corev1.Pod { p := pod(ok); p.Spec.HostIPC = true; return p }, "hostIPC"},
		"hostPath": {func() *corev1.Pod {
			p := pod(ok)
			p.Spec.Volumes = []corev1.Volume{{Name: "etc", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/etc"}}}}
			return p
		}, `volume "etc": hostPath`},
		"privileged": {func() *corev1.Pod {
			c := ok
			c.SecurityContext = &corev1.SecurityContext{Privileged: &yes}
			return pod(c)
		}, "privileged"},
		"capabilities": {func() *corev1.Pod {
			c := ok
			c.SecurityContext = &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"SYS_ADMIN"}}}
			return pod(c)
		}, "SYS_ADMIN"},
		"readOnlyRootFilesystem": {func() *corev1.Pod {
			c := ok
			c.SecurityContext = &corev1.SecurityContext{ReadOnlyRootFilesystem: &yes}
			return pod(c)
		}, "readOnlyRootFilesystem"},
		"runAsUser": {func() *corev1.Pod {
			c := ok
			c.SecurityContext = &corev1.SecurityContext{RunAsUser: &uid1000}
			return pod(c)
		}, "runAsUser: 1000"},
		"pod runAsNonRoot": {func() *corev1.Pod {
			p := pod(ok)
			p.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsNonRoot: &yes}
			return p
		}, "runAsNonRoot"},
		"pod runAsGroup": {func() *corev1.Pod {
			p := pod(ok)
			p.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsGroup: &uid1000}
			return p
		}, "runAsGroup: 1000"},
	}
	for name, tc := range cases {
		_, err := PlanPod(tc.pod())
		if !errors.Is(err, ErrPodSpec) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: %v; want ErrPodSpec saying %q", name, err, tc.says)
		}
	}
	// What a sandbox gives of itself, and the token the apiserver adds,
	// pass.
	c := ok
	no, root := false, int64(0)
	c.SecurityContext = &corev1.SecurityContext{AllowPrivilegeEscalation: &no, RunAsUser: &root,
		Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}, SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}
	p := pod(c)
	p.Spec.Volumes = []corev1.Volume{{Name: "kube-api-access-x", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{}}}}
	if _, err := PlanPod(p); err != nil {
		t.Errorf("a pod asking what a sandbox gives: %v", err)
	}
}

func TestCreatePodRefusesTheHostsNetwork(t *testing.T) {
	connected := false
	p := New(Config{Connect: noDaemon(&connected)})
	pd := pod(corev1.Container{Name: "main", Image: "sandboxd.io/project/web"})
	pd.Annotations = map[string]string{AnnotationNetwork: "host"}
	st := failedStatus(t, p, pd)
	if st.Phase != corev1.PodFailed || !strings.Contains(st.Message, "--allow-host-network") || connected {
		t.Errorf("network host: phase %s, message %q, sandboxd called %v; want Failed naming --allow-host-network, no call", st.Phase, st.Message, connected)
	}
}

func TestCreatePodDestroysASandboxAProfileGaveTheHostsNetwork(t *testing.T) {
	const id = "0123456789ab"
	d := &fakeDaemon{t: t, reply: func(c call) ([]any, string) {
		switch c.member {
		case sandboxd1.MethodFindSandbox:
			return nil, sandboxd1.ErrorNoSuchSandbox
		case sandboxd1.MethodCreateSandbox:
			return []any{id, dbus.ObjectPath("/org/sandboxd1/sandbox/" + id)}, ""
		case "GetAll":
			return []any{map[string]dbus.Variant{sandboxd1.PropNetwork: dbus.MakeVariant("host"), sandboxd1.PropProfile: dbus.MakeVariant("trusted")}}, ""
		case sandboxd1.MethodDestroy:
			return nil, ""
		}
		return nil, sandboxd1.ErrorInvalidArgs
	}}
	p := New(Config{Connect: d.connect})
	pd := pod(corev1.Container{Name: "main", Image: "sandboxd.io/project/web", Command: []string{"sleep", "infinity"}})
	pd.Annotations = map[string]string{AnnotationProfile: "trusted"}
	got := createdPod(t, p, pd)
	if st := got.Status; st.Phase != corev1.PodFailed || !strings.Contains(st.Message, `profile "trusted"`) {
		t.Errorf("a profile with the host's network: phase %s, message %q; want Failed naming the profile", st.Phase, st.Message)
	}
	if m := d.members(); !slices.Equal(m, []string{sandboxd1.MethodFindSandbox, sandboxd1.MethodCreateSandbox, "GetAll", sandboxd1.MethodDestroy}) {
		t.Errorf("calls %q; want find, create, its properties, destroy: nothing spawned or exposed", m)
	}
}

func TestContainerLogsHoldsAtMostTheLogsBound(t *testing.T) {
	const id, chunk, written = "0123456789ab", 64 << 10, 48 << 20
	// A process that writes as fast as its log is read: 48 MiB by the
	// time the kubelet would have read to the end.
	d := &fakeDaemon{t: t, reply: func(c call) ([]any, string) {
		if c.member != sandboxd1.MethodReadLog {
			return nil, sandboxd1.ErrorInvalidArgs
		}
		off := c.body[1].(uint64)
		if off >= written {
			return []any{[]byte{}, off, false}, ""
		}
		return []any{make([]byte, chunk), off + chunk, false}, ""
	}}
	p := New(Config{Connect: d.connect})
	pd := pod(corev1.Container{Name: "main", Image: "sandboxd.io/project/web", Command: []string{"yes"}})
	e := &podEntry{pod: pd, obs: Observed{SandboxID: id, Command: true}, process: "p1", made: make(chan struct{})}
	close(e.made)
	p.pods[podKey(pd.Namespace, pd.Name)] = e
	r, err := p.GetContainerLogs(context.Background(), pd.Namespace, pd.Name, "main", api.ContainerLogOpts{})
	if err != nil {
		t.Fatal(err)
	}
	n, _ := io.Copy(io.Discard, r)
	if n > maxLogHeld+chunk {
		t.Errorf("kubectl logs held %d MiB of a log the daemon keeps %d MiB of", n>>20, maxLogHeld>>20)
	}
}

func TestPodStatusCarriesNoAuthorsSandboxID(t *testing.T) {
	connected := false
	p := New(Config{Projects: []string{"web"}, Connect: noDaemon(&connected)})
	// The author names a sandbox of another's, hoping a script on the
	// node acts on it (sandboxctl promote $id).
	pd := pod(corev1.Container{Name: "main", Image: "sandboxd.io/project/secrets"})
	pd.Annotations = map[string]string{AnnotationSandboxID: "0123456789ab", AnnotationPorts: "80=127.0.0.1:22"}
	failedStatus(t, p, pd)
	got, _ := p.GetPod(context.Background(), pd.Namespace, pd.Name)
	if v, ok := got.Annotations[AnnotationSandboxID]; ok {
		t.Errorf("a pod without a sandbox says sandbox %q, its author's", v)
	}
	if v, ok := got.Annotations[AnnotationPorts]; ok {
		t.Errorf("a pod without a sandbox says ports %q, its author's", v)
	}
}

// createdPod hands pd to p and returns it as p has it once its create
// ended, made or not.
func createdPod(t *testing.T, p *Provider, pd *corev1.Pod) *corev1.Pod {
	t.Helper()
	if err := p.CreatePod(context.Background(), pd); err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	e := p.pods[podKey(pd.Namespace, pd.Name)]
	p.mu.Unlock()
	<-e.made
	got, err := p.GetPod(context.Background(), pd.Namespace, pd.Name)
	if err != nil {
		t.Fatal(err)
	}
	return got
}
