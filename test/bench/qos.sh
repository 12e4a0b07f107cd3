#!/usr/bin/env bash
# make bench-qos: the node agent's EgressQoS (TableQoS) at 1,000 namespaces
# x 10 rules x 10 pods, every pod on the benchmarked node (10,000 pods: a
# bound on any real node; -pods=100 is the stress case), against a real kube-apiserver (test/kubetest) and a real
# Open vSwitch (test/ovstest): flow counts and how they grow, full sync
# against ovs-ofctl --bundle, restart, a pod relabelled and a rule's DSCP
# changed, the agent binary's memory (which must stay inside the
# DaemonSet's memory limit), and a 100-node spread computed. See
# test/bench/agent/qos_test.go. Needs root.
#
# Extra arguments go to the benchmark, e.g. a quick try:
#   bash test/bench/qos.sh -namespaces=50 -pods=20 -rounds=1 -changes=10
# (-namespaces, -pods, -changes, -rounds, -setup-workers).
set -euo pipefail
cd "$(dirname "$0")/../.."

if [ "$(id -u)" -ne 0 ]; then
  echo "qos.sh: needs root (network namespaces and Open vSwitch)" >&2
  exit 1
fi
for bin in ovs-vswitchd ovsdb-server ovs-ofctl ip; do
  command -v "$bin" >/dev/null || { echo "qos.sh: $bin not found: install openvswitch-switch and iproute2 (make test-deps)" >&2; exit 1; }
done

# As in agent.sh, klog goes away from the output; error lines reach stderr.
go test -run '^$' -bench '^BenchmarkAgentQoS$' -benchtime 1x -count 1 -timeout 90m \
	./test/bench/agent/ -args "$@" 2>&1
