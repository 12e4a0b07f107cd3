#!/usr/bin/env bash
# make bench-scale: the cluster at Kubernetes' scalability envelope (5,000
# nodes, 150,000 pods, 10,000 EgressServices, 1,000 EgressIPs) against a real
# kube-apiserver and etcd, with kwok playing the kubelets and the real
# controller binary, once per liveness protocol (the former Lease-only one
# and the probes), and the table of both. Extra arguments go to the
# benchmark, e.g.
#   bash test/bench/scale.sh -scale-nodes=1000 -scale-pods=30000
# See test/bench/controller/scale_test.go for what is measured.
set -euo pipefail
cd "$(dirname "$0")/../.."
kwok=$(bash test/tools/build-binaries.sh --with-kwok | sed -n 's/^kwok=//p')
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
go build -o "$bin/egressflow-controller" ./cmd/egressflow-controller
# The controller's and kwok's klog info and warning lines would drown the
# figures; errors (E...) stay.
go test -run '^$' -bench '^BenchmarkScale$' -benchtime 1x -count 1 -timeout 120m \
	./test/bench/controller/ -args -kwok="$kwok" -controller-bin="$bin/egressflow-controller" "$@" 2>&1 |
	grep --line-buffered -v '^[IW][0-9]\{4\} '
