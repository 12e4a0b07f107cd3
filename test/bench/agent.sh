#!/usr/bin/env bash
# make bench-agent: the node agent at 10,000 services x 10 endpoints against
# a real kube-apiserver (test/kubetest) and a real Open vSwitch
# (test/ovstest), figures printed with their goals. See
# test/bench/agent/agent_test.go for what is measured. Needs root.
#
# Extra arguments go to the benchmark, e.g.
#   bash test/bench/agent.sh -services=1000 -rounds=1 -latency-samples=50
# (-services, -endpoints, -rounds, -latency-samples, -setup-workers).
set -euo pipefail
cd "$(dirname "$0")/../.."

if [ "$(id -u)" -ne 0 ]; then
  echo "agent.sh: needs root (network namespaces and Open vSwitch)" >&2
  exit 1
fi
for bin in ovs-vswitchd ovsdb-server ovs-ofctl ip; do
  command -v "$bin" >/dev/null || { echo "agent.sh: $bin not found: install openvswitch-switch and iproute2 (make test-deps)" >&2; exit 1; }
done

# The bench routes klog (the agent's and client-go's logs) away from the
# output; error lines still reach stderr. Lines the Go test runner prints
# around a benchmark (goos, pkg, the Benchmark line, ok) pass through.
go test -run '^$' -bench '^BenchmarkAgent$' -benchtime 1x -count 1 -timeout 60m \
	./test/bench/agent/ -args "$@" 2>&1
