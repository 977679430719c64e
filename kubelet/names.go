package kubelet

import (
	"strings"

	"k8s.io/apimachinery/pkg/types"
)

// A pod's sandbox is named k8s_<namespace>_<name>_<uid>: "_" is in no
// namespace and no pod name, and a sandbox's name is unique on the host,
// so the name alone says, after a restart of sandboxd-kubelet, which pod
// a sandbox is, and a second create of the same pod is refused
// (ErrExists) instead of making a second sandbox. A name longer than a
// sandbox's 100 bytes is cut in the pod's name; the uid stays whole.
const (
	namePrefix  = "k8s_"
	maxNameLen  = 100
	uidLen      = 36
	nameSep     = "_"
	minNamePart = 1
)

// SandboxName is the name of the sandbox of pod namespace/name of uid.
func SandboxName(namespace, name string, uid types.UID) string {
	s := namePrefix + namespace + nameSep + name + nameSep + string(uid)
	if over := len(s) - maxNameLen; over > 0 && len(name)-over >= minNamePart {
		name = name[:len(name)-over]
		s = namePrefix + namespace + nameSep + name + nameSep + string(uid)
	}
	return s
}

// PodRef is what a sandbox's name says of its pod; Name may be cut
// (Cut) when the whole did not fit.
type PodRef struct {
	Namespace, Name string
	UID             types.UID
	Cut             bool
}

// ParseSandboxName reads a name SandboxName made; ok is false for a
// sandbox that is not a pod's.
func ParseSandboxName(s string) (ref PodRef, ok bool) {
	rest, ok := strings.CutPrefix(s, namePrefix)
	if !ok {
		return PodRef{}, false
	}
	ns, rest, ok := strings.Cut(rest, nameSep)
	if !ok || ns == "" {
		return PodRef{}, false
	}
	i := strings.LastIndex(rest, nameSep)
	if i < 1 || len(rest)-i-1 != uidLen {
		return PodRef{}, false
	}
	return PodRef{Namespace: ns, Name: rest[:i], UID: types.UID(rest[i+1:]), Cut: len(s) == maxNameLen}, true
}
