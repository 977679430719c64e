package kubelet

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandboxd/sandboxd/sandboxd1"
)

const uid = "0b7e4f1c-7a2d-4c55-9c1e-6f0d2a9b3e11"

func pod(c corev1.Container) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "agents", Name: "claim-1", UID: uid},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{c}},
	}
}

func TestParseImage(t *testing.T) {
	for image, want := range map[string]string{
		"sandboxd.io/project/web":        "web",
		"sandboxd.io/project/web:latest": "web",
		"sandboxd.io/project/api_v2.1":   "api_v2.1",
	} {
		got, err := ParseImage(image)
		if err != nil || got != want {
			t.Errorf("ParseImage(%q) = %q, %v; want %q", image, got, err, want)
		}
	}
	for _, image := range []string{"nginx", "docker.io/library/web", "sandboxd.io/project/", "sandboxd.io/project/web:v2",
		"sandboxd.io/project/a/b", "sandboxd.io/project/-x", "sandboxd.io/project/web@sha256:00"} {
		_, err := ParseImage(image)
		if !errors.Is(err, ErrImage) || !strings.Contains(err.Error(), ImagePrefix+"<project>") {
			t.Errorf("ParseImage(%q) = %v; want ErrImage naming the scheme", image, err)
		}
	}
}

func TestPlanPod(t *testing.T) {
	p := pod(corev1.Container{
		Name: "main", Image: "sandboxd.io/project/web",
		Command: []string{"python3", "-m"}, Args: []string{"http.server", "8080"},
		Env:        []corev1.EnvVar{{Name: "MODE", Value: "agent"}},
		WorkingDir: "/srv/web",
		Ports:      []corev1.ContainerPort{{ContainerPort: 8080}},
		Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
			corev1.ResourceCPU:              resource.MustParse("1500m"),
			corev1.ResourceMemory:           resource.MustParse("512Mi"),
			corev1.ResourceEphemeralStorage: resource.MustParse("2Gi"),
		}},
	})
	p.Annotations = map[string]string{AnnotationNetwork: "allowlist", AnnotationProfile: "untrusted"}
	plan, err := PlanPod(p)
	if err != nil {
		t.Fatal(err)
	}
	if plan.Project != "web" || plan.Create.Name != "k8s_agents_claim-1_"+uid {
		t.Errorf("project %q, name %q", plan.Project, plan.Create.Name)
	}
	if strings.Join(plan.Argv, " ") != "python3 -m http.server 8080" || plan.Spawn.Dir != "/srv/web" || !plan.Spawn.Restart {
		t.Errorf("argv %q, spawn %+v", plan.Argv, plan.Spawn)
	}
	if len(plan.Spawn.Env) != 1 || plan.Spawn.Env[0] != "MODE=agent" {
		t.Errorf("env %q", plan.Spawn.Env)
	}
	if plan.Create.CPUQuota != 150 || plan.Create.MemoryMax != 512*sandboxd1.MiB || plan.Create.DiskQuota != 2*sandboxd1.GiB {
		t.Errorf("limits: cpu %d%%, memory %d, disk %d", plan.Create.CPUQuota, plan.Create.MemoryMax, plan.Create.DiskQuota)
	}
	if plan.Create.Network != "allowlist" || plan.Create.Profile != "untrusted" {
		t.Errorf("network %q, profile %q", plan.Create.Network, plan.Create.Profile)
	}
	if len(plan.Ports) != 1 || plan.Ports[0] != 8080 {
		t.Errorf("ports %v", plan.Ports)
	}

	// No command: the sandbox alone.
	plan, err = PlanPod(pod(corev1.Container{Name: "main", Image: "sandboxd.io/project/web"}))
	if err != nil || plan.Argv != nil {
		t.Errorf("no command: %v, argv %q", err, plan.Argv)
	}
}

func TestPlanPodRefusals(t *testing.T) {
	ok := corev1.Container{Name: "main", Image: "sandboxd.io/project/web", Command: []string{"sleep", "infinity"}}
	cases := map[string]struct {
		pod  func() *corev1.Pod
		want error
		says string
	}{
		"image": {func() *corev1.Pod { c := ok; c.Image = "busybox"; return pod(c) }, ErrImage, `"busybox"`},
		"init container": {func() *corev1.Pod {
			p := pod(ok)
			p.Spec.InitContainers = []corev1.Container{{Name: "setup", Image: ok.Image}}
			return p
		}, ErrPodShape, `init container "setup"`},
		"two containers": {func() *corev1.Pod {
			p := pod(ok)
			p.Spec.Containers = append(p.Spec.Containers, ok)
			return p
		}, ErrPodShape, "2 containers"},
		"udp": {func() *corev1.Pod {
			c := ok
			c.Ports = []corev1.ContainerPort{{ContainerPort: 53, Protocol: corev1.ProtocolUDP}}
			return pod(c)
		}, ErrPodSpec, "53/UDP"},
		"small memory": {func() *corev1.Pod {
			c := ok
			c.Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Mi")}
			return pod(c)
		}, ErrPodSpec, "at least 16 MiB"},
		"gpu": {func() *corev1.Pod {
			c := ok
			c.Resources.Limits = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}
			return pod(c)
		}, ErrPodSpec, "nvidia.com/gpu"},
		"network": {func() *corev1.Pod {
			p := pod(ok)
			p.Annotations = map[string]string{AnnotationNetwork: "bridge"}
			return p
		}, ErrPodSpec, `"bridge"`},
	}
	for name, tc := range cases {
		_, err := PlanPod(tc.pod())
		if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: %v; want %v saying %q", name, err, tc.want, tc.says)
		}
	}
}

func TestSandboxName(t *testing.T) {
	n := SandboxName("agents", "claim-1", uid)
	ref, ok := ParseSandboxName(n)
	if !ok || ref.Namespace != "agents" || ref.Name != "claim-1" || ref.UID != uid {
		t.Errorf("%q parsed as %+v, %v", n, ref, ok)
	}
	long := strings.Repeat("a", 90) + ".b"
	n = SandboxName("agents", long, uid)
	if len(n) != maxNameLen {
		t.Errorf("a long name is %d bytes", len(n))
	}
	ref, ok = ParseSandboxName(n)
	if !ok || !ref.Cut || ref.UID != uid || !strings.HasPrefix(long, ref.Name) {
		t.Errorf("%q parsed as %+v, %v", n, ref, ok)
	}
	for _, s := range []string{"web-1", "k8s_", "k8s_ns_name_short", "k8s__name_" + uid} {
		if _, ok := ParseSandboxName(s); ok {
			t.Errorf("%q parsed as a pod's sandbox", s)
		}
	}
}

func TestTailLines(t *testing.T) {
	b := []byte("one\ntwo\nthree\n")
	for n, want := range map[int]string{0: "one\ntwo\nthree\n", 1: "three\n", 2: "two\nthree\n", 5: "one\ntwo\nthree\n"} {
		if got := string(TailLines(b, n)); got != want {
			t.Errorf("TailLines(%d) = %q; want %q", n, got, want)
		}
	}
	if got := string(TailLines([]byte("a\nb"), 1)); got != "b" {
		t.Errorf("a last line without newline: %q", got)
	}
}
