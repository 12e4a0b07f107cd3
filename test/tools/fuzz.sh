#!/usr/bin/env bash
# Runs every fuzz target of the module for the given -fuzztime (a count such
# as 50000x, or a duration such as 10m; default 50000x) on top of its seed
# corpus (f.Add calls and testdata/fuzz). Fails on the first crash; the
# crashing input is saved under testdata/fuzz by go test.
set -euo pipefail
fuzztime=${1:-50000x}
cd "$(dirname "$0")/../.."
count=0
for pkg in $(go list ./...); do
  for target in $(go test -list '^Fuzz' "$pkg" | grep '^Fuzz' || true); do
    echo "fuzz: $pkg $target ($fuzztime)"
    go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" "$pkg"
    count=$((count + 1))
  done
done
echo "fuzz: $count targets ran without a crash"
