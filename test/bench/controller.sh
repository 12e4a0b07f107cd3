#!/usr/bin/env bash
# make bench-controller: the cluster component at 1,000 nodes x 5,000
# services against a real kube-apiserver (test/kubetest), figures printed.
# Extra arguments go to the benchmark, e.g.
#   bash test/bench/controller.sh -nodes=100 -services=500
# See test/bench/controller/controller_test.go for what is measured.
set -euo pipefail
cd "$(dirname "$0")/../.."
# The controller's klog info and warning lines would drown the figures;
# errors (E...) stay.
go test -run '^$' -bench '^BenchmarkController$' -benchtime 1x -count 1 -timeout 20m \
	./test/bench/controller/ -args "$@" 2>&1 | grep --line-buffered -v '^[IW][0-9]\{4\} '
