#!/usr/bin/env bash
# make bench-cloudip: the cloud controller at 100 nodes x 1,000
# CloudPrivateIPConfigs, against a real kube-apiserver (test/kubetest) and
# the local EC2 endpoint test/fakeec2 through the AWS SDK; a table of
# figures is printed. See test/bench/controller/cloudip_test.go for what is
# measured. Extra arguments go to the benchmark, e.g.
#   bash test/bench/cloudip.sh -cloud-latency=50ms -cloud-list-delay=2s
set -euo pipefail
cd "$(dirname "$0")/../.."
# The controller's klog info and warning lines would drown the figures;
# errors (E...) stay.
go test -run '^$' -bench '^BenchmarkCloudIP$' -benchtime 1x -count 1 -timeout 20m \
	./test/bench/controller/ -args "$@" 2>&1 | grep --line-buffered -v '^[IW][0-9]\{4\} '
