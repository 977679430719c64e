#!/usr/bin/env bash
# Builds the fleet test's control plane into .tools/fleet/ (or $1) once:
# kube-apiserver, kube-scheduler, kube-controller-manager and kubectl
# (k8s.io/kubernetes v1.37.2), the agent-sandbox controller v0.5.6, and etcd from Debian's
# etcd-server package unpacked (not installed: no service starts). Each is
# kept between runs on one machine; the first build takes about 20 minutes
# on 2 cores. A stamp per tool names the module versions it was built from,
# so a version change here builds again.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:-$here/../../../.tools/fleet}"
mkdir -p "$out/bin"
out="$(cd "$out" && pwd)"
# One build at a time: a second caller (CI's fleet-test while its early
# background build runs) waits for the first and finds its stamps.
exec 9>"$out/.lock"
flock 9
export PATH="$PATH:/usr/local/go/bin"
export GOFLAGS=-mod=mod

build() { # module-dir stamp-name ldflags package...
	local dir="$1" name="$2" ldflags="$3"; shift 3
	local stamp="$out/$name.stamp" want
	want="$( (cat "$here/$dir/go.mod" "$here/$dir/go.sum"; echo "$ldflags $*") | sha256sum | cut -c1-16)"
	if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
		return
	fi
	echo "fleet tools: building $name (once per machine: about 20 minutes on 2 cores for kube, 5 for agent-sandbox)" >&2
	(cd "$here/$dir" && go build -trimpath -ldflags "$ldflags" -o "$out/bin/" "$@")
	echo "$want" > "$stamp"
}

# The version the programs say (a module build has no git tree to read it
# from, and kubectl refuses to parse the placeholder); kube/go.mod's.
kube_version="$(sed -n 's/^require k8s.io\/kubernetes \(v[0-9.]*\)$/\1/p' "$here/kube/go.mod")"
minor="$(echo "$kube_version" | cut -d. -f2)"
kube_ldflags=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	kube_ldflags="$kube_ldflags -X $pkg.gitVersion=$kube_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
done
build kube kube "$kube_ldflags" k8s.io/kubernetes/cmd/kube-apiserver \
	k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kube-controller-manager \
	k8s.io/kubernetes/cmd/kubectl
build agentsandbox agent-sandbox "" sigs.k8s.io/agent-sandbox/cmd/agent-sandbox-controller

if [ ! -x "$out/bin/etcd" ]; then
	tmp="$(mktemp -d)"
	trap 'rm -rf "$tmp"' EXIT
	(cd "$tmp" && apt-get download etcd-server >/dev/null && dpkg-deb -x etcd-server_*.deb root)
	install -m 0755 "$tmp/root/usr/bin/etcd" "$out/bin/etcd"
fi
# The CRDs the controller serves, from the same module as its binary.
crds="$(cd "$here/agentsandbox" && go list -m -f '{{.Dir}}' sigs.k8s.io/agent-sandbox)/k8s/crds"
mkdir -p "$out/crds"
cp "$crds"/*.yaml "$out/crds/"
