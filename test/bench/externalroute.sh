#!/usr/bin/env bash
# make bench-externalroute: the node agent's AdminPolicyBasedExternalRoute
# part at 1,000 namespaces x 2 policies x 4 next hops x 10 pods, every pod
# on the benchmarked node, against a real kube-apiserver (test/kubetest) and
# a real Open vSwitch (test/ovstest): the flows and groups against the
# benchmark's own count, full sync against `ovs-ofctl bundle` of the same
# groups and flows, restart, and a next hop's BFD session going down (and
# up) to the groups changed on the bridge (see
# test/bench/agent/externalroute_test.go); then BFD's own detection time,
# with our engine and with FRR's bfdd as the peer (controller/bfd's
# BenchmarkDetection); then a gateway killed on the cluster in Docker
# (test/dockercluster BenchmarkExternalRouteFailover). Needs root and Docker.
#
# Extra arguments go to the agent benchmark, e.g. a quick try:
#   bash test/bench/externalroute.sh -er-namespaces=20 -er-pods=2 -rounds=1 -er-changes=5
# (-er-namespaces, -er-pods, -er-hops, -er-changes, -rounds, -setup-workers).
set -euo pipefail
cd "$(dirname "$0")/../.."

if [ "$(id -u)" -ne 0 ]; then
  echo "externalroute.sh: needs root (network namespaces and Open vSwitch)" >&2
  exit 1
fi
for bin in ovs-vswitchd ovsdb-server ovs-ofctl ovs-appctl ip /usr/lib/frr/bfdd; do
  command -v "$bin" >/dev/null || { echo "externalroute.sh: $bin not found: install openvswitch-switch, iproute2 and frr (make test-deps)" >&2; exit 1; }
done

# As in agent.sh, klog goes away from the output; error lines reach stderr.
go test -run '^$' -bench '^BenchmarkAgentExternalRoute$' -benchtime 1x -count 1 -timeout 60m \
	./test/bench/agent/ -args "$@" 2>&1 | grep -v '^[IWE][0-9]'

# How long a BFD session takes to declare a dead gateway down, at the
# default 100 ms x 3: the rest of a failover's time.
go test -run '^$' -bench '^BenchmarkDetection$' -benchtime 20x -count 1 -timeout 20m ./controller/bfd/ 2>&1 | grep -v '^[IWE][0-9]'

# On the cluster in Docker, with two external gateway containers running
# FRR's bfdd: 10 rounds of docker kill of a gateway while the routed pods
# send, to the last frame any node sent towards it (p50/p99).
go test -tags e2e -run '^$' -bench '^BenchmarkExternalRouteFailover$' -benchtime 10x -count 1 -timeout 60m ./test/dockercluster 2>&1 | grep -v '^[IWE][0-9]'
