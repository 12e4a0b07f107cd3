#!/usr/bin/env bash
# make bench-firewall: the node agent's EgressFirewall (TableFirewall) at
# 100 namespaces x 1,000 rules x 50 pods, every pod on the benchmarked node
# (the worst case for one agent's pods), against a real kube-apiserver
# (test/kubetest) and a real Open vSwitch (test/ovstest): the flow count
# against docs/egressfirewall.md's formula, full sync against ovs-ofctl
# --bundle of the same flows, restart, a rule flipped, a rule's CIDR moved
# and a DNS answer changed (to enforcement: the bundle carrying the new
# flow acknowledged), and the agent binary's memory; then the DNS latency
# that held replies add (BenchmarkDNSReplyHold). See
# test/bench/agent/firewall_test.go. Needs root.
#
# Extra arguments go to the benchmark, e.g. a quick try:
#   bash test/bench/firewall.sh -fw-namespaces=10 -fw-rules=100 -fw-pods=5 -rounds=1 -fw-changes=10
# (-fw-namespaces, -fw-rules, -fw-pods, -fw-changes, -rounds, -setup-workers).
set -euo pipefail
cd "$(dirname "$0")/../.."

if [ "$(id -u)" -ne 0 ]; then
  echo "firewall.sh: needs root (network namespaces and Open vSwitch)" >&2
  exit 1
fi
for bin in ovs-vswitchd ovsdb-server ovs-ofctl ovs-appctl ip; do
  command -v "$bin" >/dev/null || { echo "firewall.sh: $bin not found: install openvswitch-switch and iproute2 (make test-deps)" >&2; exit 1; }
done

# As in agent.sh, klog goes away from the output; error lines reach stderr.
go test -run '^$' -bench '^BenchmarkAgentFirewall$' -benchtime 1x -count 1 -timeout 60m \
	./test/bench/agent/ -args "$@" 2>&1

# The DNS latency the held replies add (docs/egressfirewall.md, "Held
# replies"): lookups from a pod on one node, every answer a new address,
# against an answer already in the flows and against the snoop flows
# copying (no hold), in the same run.
go test -run '^$' -bench '^BenchmarkDNSReplyHold$' -benchtime 1x -count 1 -timeout 10m ./controller/agent/ 2>&1 | grep -v '^[IWE][0-9]'
