#!/usr/bin/env bash
# make bench-egressip-assign: the cluster component's EgressIP assignment
# at 100 egress nodes x 1,000 EgressIPs of one address, against a real
# kube-apiserver (test/kubetest); a table of figures is printed. See
# test/bench/controller/egressip_test.go for what is measured. Extra arguments
# go to the benchmark, e.g.
#   bash test/bench/egressip-assign.sh -eip-nodes=10 -egressips=100
set -euo pipefail
cd "$(dirname "$0")/../.."
# The controller's klog info and warning lines would drown the figures;
# errors (E...) stay.
go test -run '^$' -bench '^BenchmarkEgressIPAssign$' -benchtime 1x -count 1 -timeout 20m \
	./test/bench/controller/ -args "$@" 2>&1 | grep --line-buffered -v '^[IW][0-9]\{4\} '
