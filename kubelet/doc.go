// Package kubelet is the fleet's node: a virtual-kubelet provider that
// maps pods onto sandboxes over the Go client.
//
// sandboxd-kubelet (cmd/sandboxd-kubelet) registers the host as a
// Kubernetes node through virtual-kubelet's nodeutil (the node, its
// lease, the pod controller and the kubelet API with webhook authn/authz
// are virtual-kubelet's), and this package is what virtual-kubelet calls:
//
//   - node.go: the node as registered (capacity from sandboxd's bounds,
//     labels for its projects and pool, the taint) and its readiness,
//     which follows whether sandboxd answers on the bus;
//   - image.go, plan.go: a pod's one container as a sandbox's create
//     options, its command a background process (pure, tested without
//     root);
//   - names.go: the sandbox's name, which carries the pod's namespace,
//     name and uid, so that a restarted kubelet finds its sandboxes;
//   - pods.go: the pods' life (create, delete, the sandboxes found again);
//   - status.go: a pod's status from its sandbox's state (pure);
//   - exec.go, logs.go: kubectl exec and logs onto Exec, ExecTerminal
//     and the background process's log;
//   - stats.go: what the kubelet API asks that sandboxd does not serve.
//
// It talks to sandboxd only through package client, as any client: it
// sees and touches what the user it runs as may (root: every sandbox).
// docs/fleet.md says how to put a host under a cluster.
package kubelet
