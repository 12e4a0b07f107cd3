#!/usr/bin/env bash
# make bench-egressip: EgressIP at the issue's scale, printed as tables:
#  1. the cluster component's assignment of 1,000 EgressIPs over 100 egress
#     nodes on a real kube-apiserver (time to all assigned, API writes per
#     assignment): test/bench/controller, BenchmarkEgressIPAssign;
#  2. the node agent with 10,000 selected pods on a real Open vSwitch: full
#     sync against ovs-ofctl --bundle of the same flows, restart, takeover
#     and relabel latency, memory: test/bench/agent/egressip_test.go;
#  3. takeover on real packets (controller/agent, two nodes and an external
#     host in network namespaces): from the status update to the external
#     host's neighbour entry naming the new holder, and to its first packet
#     with the egress IP through it.
# Needs root.
#
# This script is part 2 (make bench-egressip runs all three). Extra
# arguments go to it, e.g. a quick try:
#   bash test/bench/egressip.sh -eip-pods=1000 -eip-objects=10 -rounds=1 -eip-changes=10
set -euo pipefail
cd "$(dirname "$0")/../.."

if [ "$(id -u)" -ne 0 ]; then
  echo "egressip.sh: needs root (network namespaces and Open vSwitch)" >&2
  exit 1
fi
for bin in ovs-vswitchd ovsdb-server ovs-ofctl ovs-appctl ip; do
  command -v "$bin" >/dev/null || { echo "egressip.sh: $bin not found: install openvswitch-switch and iproute2 (make test-deps)" >&2; exit 1; }
done

go test -run '^$' -bench '^BenchmarkAgentEgressIP$' -benchtime 1x -count 1 -timeout 60m \
	./test/bench/agent/ -args "$@" 2>&1
