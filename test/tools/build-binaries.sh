#!/usr/bin/env bash
# Builds the Kubernetes binaries the integration tests and the demo run, from
# the Go module proxy, into a cache outside the repo keyed by version:
#   $EGRESSFLOW_CACHE/bin/kube-apiserver-<v>, kubectl-<v>   (test/tools/kube)
#   $EGRESSFLOW_CACHE/bin/etcd-<v>                          (test/tools/etcd)
# The versions come from the go.mod files of those two tools modules, which
# keep k8s.io/kubernetes out of the product's go.mod. A binary already in the
# cache is not built again (the first kube-apiserver build takes about 4
# minutes on 2 cores). Prints `name=path` for each binary.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${EGRESSFLOW_CACHE:-$HOME/.cache/egressflow}
mkdir -p "$cache/bin"

version_of() { # module dir, module path
  (cd "$1" && go list -m -f '{{.Version}}' "$2")
}

build() { # name, module dir, package, version
  local out="$cache/bin/$1-$4"
  if [ ! -x "$out" ]; then
    echo "building $1 $4 (cached afterwards in $cache/bin)" >&2
    (cd "$2" && go build -trimpath -o "$out.tmp" "$3")
    mv "$out.tmp" "$out"
  fi
  echo "$1=$out"
}

kube=$(version_of "$here/kube" k8s.io/kubernetes)
etcd=$(version_of "$here/etcd" go.etcd.io/etcd/server/v3)
build etcd "$here/etcd" go.etcd.io/etcd/server/v3 "$etcd"
build kube-apiserver "$here/kube" k8s.io/kubernetes/cmd/kube-apiserver "$kube"
if [ "${1:-}" = "--with-kubectl" ]; then
  build kubectl "$here/kube" k8s.io/kubernetes/cmd/kubectl "$kube"
fi
