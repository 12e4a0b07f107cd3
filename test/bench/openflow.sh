#!/usr/bin/env bash
# Benchmarks of the openflow package against a real Open vSwitch
# (`make bench-openflow`). Each benchmark starts its own isolated switch
# through test/ovstest, so this needs root and Debian's openvswitch-switch.
#
# Prints a table: our bundle install rate next to `ovs-ofctl --bundle
# add-flows` of the same 100k flows into the same switch in the same run,
# the one-flow transaction latency, delete-by-cookie and dump of 100k
# flows, and the allocations of encoding one flow mod.
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

ours=$(median BenchmarkBundleInstall100k flows/s)
theirs=$(median BenchmarkBundleInstall100k ofctl_flows/s)
ratio=$(median BenchmarkBundleInstall100k ratio_vs_ofctl)

printf '\n%-52s %15s %s\n' "openflow benchmark (median of $count)" "value" "goal"
printf '%-52s %15s\n' "----------------------------------------------------" "---------------"
printf '%-52s %15.0f\n' "bundle install 100k SNAT flows, our client (flows/s)" "$ours"
printf '%-52s %15.0f\n' "same flows, ovs-ofctl --bundle add-flows (flows/s)" "$theirs"
printf '%-52s %15.2f %s\n' "ratio ours / ovs-ofctl" "$ratio" ">= 1.0"
printf '%-52s %15s %s\n' "one-flow transaction latency p50 (ms)" "$(median BenchmarkTransactionLatency p50_ms)"
printf '%-52s %15s %s\n' "one-flow transaction latency p99 (ms)" "$(median BenchmarkTransactionLatency p99_ms)" "<= 1"
printf '%-52s %15s\n' "delete 100k flows by cookie (ms)" "$(median BenchmarkDeleteByCookie100k ms/delete)"
printf '%-52s %15s\n' "dump 100k flows through the client (ms)" "$(median BenchmarkDump100k ms/dump)"
printf '%-52s %15s\n' "encode one flow mod, reused buffer (ns)" "$(median BenchmarkEncodeFlowMod ns/op)"
printf '%-52s %15s %s\n' "allocations per encoded flow mod, reused buffer" "$(median BenchmarkEncodeFlowMod allocs/op)" "<= 2"
printf '%-52s %15s %s\n' "allocations per MarshalMessage(flow mod)" "$(median BenchmarkMarshalFlowMod allocs/op)" "<= 2"
