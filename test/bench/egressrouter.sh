#!/usr/bin/env bash
# make bench-egressrouter: EgressRouter, in three parts. The controller at 10
# nodes x 1,000 routers of 10 rules against a real kube-apiserver
# (test/bench/controller/egressrouter_test.go: time to all Available, the
# spread, writes per router, a holder's agent stopped); then the holder's
# agent at 100 routers x 10 rules against a real kube-apiserver and a real
# Open vSwitch (test/bench/agent/egressrouter_test.go: the flow count, full
# sync against `ovs-ofctl bundle` of the same flows, restart, a router
# moved to the node); then, on the cluster in Docker, failover against the
# reference's way, a replicas-1 Deployment whose pod redirects with nftables
# (test/dockercluster/egressrouter_bench_test.go: the router's node killed,
# 10 rounds, the reference in the first 3 of them; each of its rounds waits
# out Kubernetes' eviction, about 6 minutes). Needs root and Docker. Extra
# arguments go to the agent's benchmark (-routers, -router-rules, -rounds,
# -router-moves), e.g.
#   bash test/bench/egressrouter.sh -routers=20 -rounds=1
# FAILOVER_ROUNDS and BENCH_REFERENCE_ROUNDS change the last part's rounds;
# BENCH_REFERENCE_TOLERATION_SECONDS gives the reference's pod shorter
# tolerations of an unreachable node than the API server's default 300 s.
set -euo pipefail
cd "$(dirname "$0")/../.."

if [ "$(id -u)" -ne 0 ]; then
  echo "egressrouter.sh: needs root (network namespaces and Open vSwitch)" >&2
  exit 1
fi
for bin in ovs-vswitchd ovsdb-server ovs-ofctl ip docker; do
  command -v "$bin" >/dev/null || { echo "egressrouter.sh: $bin not found: install openvswitch-switch, iproute2 and Docker (make test-deps)" >&2; exit 1; }
done

# klog's info and warning lines would drown the figures; errors stay.
go test -run '^$' -bench '^BenchmarkEgressRouterAssign$' -benchtime 1x -count 1 -timeout 30m \
	./test/bench/controller/ 2>&1 | grep --line-buffered -v '^[IW][0-9]\{4\} '
go test -run '^$' -bench '^BenchmarkAgentEgressRouter$' -benchtime 1x -count 1 -timeout 30m \
	./test/bench/agent/ -args "$@" 2>&1 | grep -v '^[IWE][0-9]'
go test -tags e2e -run '^$' -bench '^BenchmarkEgressRouterFailover$' -benchtime "${FAILOVER_ROUNDS:-10}x" -count 1 -timeout 150m \
	./test/dockercluster/
