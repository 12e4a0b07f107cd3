#!/usr/bin/env bash
# Benchmarks of the openflow package against a real Open vSwitch
# (`make bench-openflow`). Each benchmark starts its own isolated switch
# through test/ovstest, so this needs root and Debian's openvswitch-switch.
#
# Prints a table: our bundle install rate next to `ovs-ofctl --bundle
# add-flows` of the same 100k flows into the same switch in the same run,
# and next to the switch's own limit (the same bundle pre-encoded once and
# written raw, every message pipelined), each as a ratio; the one-flow
# transaction latency, delete-by-cookie and dump of 100k flows, and the
# allocations of encoding one flow mod.
#
# Each install of 100k flows follows a delete of them and waits until the
# switch has settled: until ovs-vswitchd's RCU thread, which frees the
# deleted flows after the delete is answered, has used no CPU for 200 ms
# (ovstest.Switch.Settle). Started right after the delete instead, a round
# shares the switch's cores with that thread; the "unsettled" lines show
# the raw stream and our client measured that way.
#
# Environment: BENCH_COUNT (default 3) repeats each benchmark and keeps the
# median; BENCH_LATENCY_N (default 2000) is the number of one-flow
# transactions measured.
set -euo pipefail
cd "$(dirname "$0")/../.."

if [ "$(id -u)" -ne 0 ]; then
  echo "openflow.sh: needs root (network namespaces and Open vSwitch)" >&2
  exit 1
fi
for bin in ovs-vswitchd ovsdb-server ovs-ofctl; do
  command -v "$bin" >/dev/null || { echo "openflow.sh: $bin not found: install openvswitch-switch" >&2; exit 1; }
done

count=${BENCH_COUNT:-3}
latency_n=${BENCH_LATENCY_N:-2000}
out=$(mktemp)
trap 'rm -f "$out"' EXIT

run() { # pattern benchtime
  go test ./openflow/ -run '^$' -bench "$1" -benchtime "$2" -count "$count" -benchmem 2>&1 |
    grep -E '^(Benchmark|ok|FAIL|---)' | tee -a "$out" >&2
}
echo "running openflow benchmarks (count=$count); raw output follows on stderr" >&2
run '^BenchmarkEncodeFlowMod$|^BenchmarkMarshalFlowMod$|^BenchmarkEncodeBundleAdd$' 1s
run '^BenchmarkBundleInstall100k$' 1x
run '^BenchmarkTransactionLatency$' "${latency_n}x"
run '^BenchmarkDeleteByCookie100k$' 1x
run '^BenchmarkDump100k$' 1x
if grep -q '^FAIL' "$out"; then
  echo "openflow.sh: a benchmark failed" >&2
  exit 1
fi

# median NAME UNIT: the median of the value printed before UNIT on NAME's lines.
median() {
  grep "^$1-" "$out" | awk -v unit="$2" '{for (i = 2; i < NF; i++) if ($(i+1) == unit) print $i}' |
    sort -g | awk '{v[NR] = $1} END {if (NR == 0) print "n/a"; else print v[int((NR + 1) / 2)]}'
}

i=BenchmarkBundleInstall100k
printf '\n%-60s %15s %s\n' "openflow benchmark (median of $count)" "value" "goal"
printf '%-60s %15s\n' "------------------------------------------------------------" "---------------"
printf '%-60s %15.0f\n' "bundle install 100k SNAT flows, our client (flows/s)" "$(median $i flows/s)"
printf '%-60s %15.0f\n' "same flows, ovs-ofctl --bundle add-flows (flows/s)" "$(median $i ofctl_flows/s)"
printf '%-60s %15.0f\n' "same flows, the switch's limit: raw pipelined bundle (flows/s)" "$(median $i limit_flows/s)"
printf '%-60s %15.2f %s\n' "ratio ours / ovs-ofctl" "$(median $i ratio_vs_ofctl)" ">= 1.0"
printf '%-60s %15.2f %s\n' "ratio ours / the switch's limit" "$(median $i ratio_vs_limit)" ">= 0.9"
printf '%-60s %15.0f\n' "unsettled (right after the delete): our client (flows/s)" "$(median $i unsettled_flows/s)"
printf '%-60s %15.0f\n' "unsettled (right after the delete): raw bundle (flows/s)" "$(median $i unsettled_limit_flows/s)"
printf '%-60s %15.0f\n' "settling after a delete of 100k flows (ms, mean)" "$(median $i settle_ms)"
printf '%-60s %15s %s\n' "one-flow transaction latency p50 (ms)" "$(median BenchmarkTransactionLatency p50_ms)"
printf '%-60s %15s %s\n' "one-flow transaction latency p99 (ms)" "$(median BenchmarkTransactionLatency p99_ms)" "<= 1"
printf '%-60s %15s\n' "delete 100k flows by cookie (ms)" "$(median BenchmarkDeleteByCookie100k ms/delete)"
d=BenchmarkDump100k
printf '%-60s %15.0f\n' "dump 100k flows, client decoding them (flows/s)" "$(median $d decoded_flows/s)"
printf '%-60s %15.0f\n' "dump 100k flows, client reading them in place (flows/s)" "$(median $d entries_flows/s)"
printf '%-60s %15.0f\n' "dump 100k flows, ovs-ofctl dump-flows (flows/s)" "$(median $d ofctl_flows/s)"
printf '%-60s %15s\n' "encode one flow mod, reused buffer (ns)" "$(median BenchmarkEncodeFlowMod ns/op)"
printf '%-60s %15s %s\n' "allocations per encoded flow mod, reused buffer" "$(median BenchmarkEncodeFlowMod allocs/op)" "<= 2"
printf '%-60s %15s %s\n' "allocations per MarshalMessage(flow mod)" "$(median BenchmarkMarshalFlowMod allocs/op)" "<= 2"
