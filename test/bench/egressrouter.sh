#!/usr/bin/env bash
# make bench-egressrouter: EgressRouter, in two parts. The controller at 10
# nodes x 1,000 routers of 10 rules against a real kube-apiserver
# (test/bench/controller/egressrouter_test.go: time to all Available, the
# spread, writes per router, a holder's agent stopped); then the holder's
# agent at 100 routers x 10 rules against a real kube-apiserver and a real
# Open vSwitch (test/bench/agent/egressrouter_test.go: the flow count, full
# sync against `ovs-ofctl bundle` of the same flows, restart, a router
# moved to the node). Needs root. Extra arguments go to the agent's
# benchmark (-routers, -router-rules, -rounds, -router-moves), e.g.
#   bash test/bench/egressrouter.sh -routers=20 -rounds=1
set -euo pipefail
cd "$(dirname "$0")/../.."

if [ "$(id -u)" -ne 0 ]; then
  echo "egressrouter.sh: needs root (network namespaces and Open vSwitch)" >&2
  exit 1
fi
for bin in ovs-vswitchd ovsdb-server ovs-ofctl ip; do
  command -v "$bin" >/dev/null || { echo "egressrouter.sh: $bin not found: install openvswitch-switch and iproute2 (make test-deps)" >&2; exit 1; }
done

# klog's info and warning lines would drown the figures; errors stay.
go test -run '^$' -bench '^BenchmarkEgressRouterAssign$' -benchtime 1x -count 1 -timeout 30m \
	./test/bench/controller/ 2>&1 | grep --line-buffered -v '^[IW][0-9]\{4\} '
go test -run '^$' -bench '^BenchmarkAgentEgressRouter$' -benchtime 1x -count 1 -timeout 30m \
	./test/bench/agent/ -args "$@" 2>&1 | grep -v '^[IWE][0-9]'
