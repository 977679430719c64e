package kubelet

import (
	"context"
	"slices"
	"strings"
	"testing"

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
	if err := p.CreatePod(context.Background(), pd); err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	e := p.pods[podKey(pd.Namespace, pd.Name)]
	p.mu.Unlock()
	<-e.made
	got, _ := p.GetPod(context.Background(), pd.Namespace, pd.Name)
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
