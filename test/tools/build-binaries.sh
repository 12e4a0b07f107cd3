#!/usr/bin/env bash
# Builds the Kubernetes binaries the integration tests and the demo run, from
# the Go module proxy, into a cache outside the repo keyed by version:
#   $EGRESSFLOW_CACHE/bin/kube-apiserver-<v>, kubectl-<v>   (test/tools/kube)
#   $EGRESSFLOW_CACHE/bin/etcd-<v>                          (test/tools/etcd)
#   $EGRESSFLOW_CACHE/bin/helm-<v>                          (test/tools/helm)
# and, with --with-cluster, what the cluster in Docker (test/dockercluster)
# runs besides: kubelet, kube-controller-manager, kube-scheduler, kube-proxy,
# kubectl, and flannel's daemon and CNI plugin (test/tools/flannel,
# test/tools/cni-flannel) for the clusters whose pods use flannel; with --with-kwok, kwok (test/tools/kwok), which make bench-scale
# runs as the kubelets of thousands of simulated nodes.
# The versions come from the go.mod files of those two tools modules, which
# keep k8s.io/kubernetes out of the product's go.mod. A binary already in the
# cache is not built again (the first kube-apiserver build takes about 4
# minutes on 2 cores, helm about 2). Prints `name=path` for each binary.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${EGRESSFLOW_CACHE:-$HOME/.cache/egressflow}
mkdir -p "$cache/bin"

version_of() { # module dir, module path
  (cd "$1" && go list -m -f '{{.Version}}' "$2")
}

build() { # name, module dir, package, version, [extra -ldflags]; env: CGO=1 (cgo), BUILD_FLAGS
  local out="$cache/bin/$1-$4"
  if [ ! -x "$out" ]; then
    echo "building $1 $4 (cached afterwards in $cache/bin)" >&2
    # Static, stripped, and stamped with its version (kubelet reports it
    # in the Node's status): the kubelet runs inside the node image.
    # A temporary name of its own: two builds at once (make test-deps and
    # a test that starts the API server) must not move each other's file.
    local tmp
    tmp=$(mktemp "$out.XXXXXX.tmp")
    (cd "$2" && CGO_ENABLED=${CGO:-0} go build -trimpath ${BUILD_FLAGS:-} -ldflags "-s -w -X k8s.io/component-base/version.gitVersion=$4 ${5:-}" -o "$tmp" "$3") || { rm -f "$tmp"; exit 1; }
    chmod 0755 "$tmp"
    mv "$tmp" "$out"
  fi
  echo "$1=$out"
}

kube=$(version_of "$here/kube" k8s.io/kubernetes)
etcd=$(version_of "$here/etcd" go.etcd.io/etcd/server/v3)
build etcd "$here/etcd" go.etcd.io/etcd/server/v3 "$etcd"
build kube-apiserver "$here/kube" k8s.io/kubernetes/cmd/kube-apiserver "$kube"
# helm renders and lints the chart (deploy/charts/egressflow) in every
# `go test ./...` (test/chart), and installs it in the e2e tests.
# Stamped as helm's own release build is: its version, and the Kubernetes
# version its client libraries speak, which `helm template` and `helm lint`
# check a chart's kubeVersion against (without it, v1.20).
helm=$(version_of "$here/helm" helm.sh/helm/v3)
k8s_minor=$(version_of "$here/helm" k8s.io/client-go | cut -d. -f2)
build helm "$here/helm" helm.sh/helm/v3/cmd/helm "$helm" "-X helm.sh/helm/v3/internal/version.version=$helm \
-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$k8s_minor \
-X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=$k8s_minor"
for arg in "$@"; do
  case "$arg" in
  --with-kubectl)
    build kubectl "$here/kube" k8s.io/kubernetes/cmd/kubectl "$kube" ;;
  --with-kwok)
    build kwok "$here/kwok" sigs.k8s.io/kwok/cmd/kwok "$(version_of "$here/kwok" sigs.k8s.io/kwok)" ;;
  --with-cluster)
    for cmd in kubectl kubelet kube-controller-manager kube-scheduler kube-proxy; do
      build "$cmd" "$here/kube" "k8s.io/kubernetes/cmd/$cmd" "$kube"
    done
    # flanneld's UDP backend is C (cgo), as its release builds are: linked
    # statically, so that it runs in any node image.
    flannel=$(version_of "$here/flannel" github.com/flannel-io/flannel)
    CGO=1 BUILD_FLAGS="-tags netgo,osusergo" build flanneld "$here/flannel" github.com/flannel-io/flannel "$flannel" \
      "-X github.com/flannel-io/flannel/pkg/version.Version=$flannel -linkmode external -extldflags -static"
    build cni-flannel "$here/cni-flannel" github.com/containernetworking/plugins/plugins/meta/flannel \
      "$(version_of "$here/cni-flannel" github.com/containernetworking/plugins)" ;;
  *)
    echo "build-binaries: unknown argument $arg" >&2; exit 2 ;;
  esac
done
