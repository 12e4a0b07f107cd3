#!/usr/bin/env bash
# Runs `go test` with the given arguments, its output passed through as it
# comes, and, when it fails, repeats the failures at the end: the FAIL
# lines, the assertions' file:line messages and any panic. A CI report that
# keeps only the tail of a long run then still names what failed, however
# much log the failing package printed after it.
set -uo pipefail

log=$(mktemp "${TMPDIR:-/tmp}/egressflow-gotest.XXXXXX")
trap 'rm -f "$log"' EXIT

go test "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
if [ "$rc" -ne 0 ]; then
  echo
  echo "=== go test $* failed (exit $rc); its failures, repeated:"
  # The test's own messages are indented file:line lines under its FAIL
  # line; klog lines that interleave start with a severity letter.
  grep -E -- '^[[:space:]]*--- FAIL|^[[:space:]]+[[:alnum:]_./-]+_test\.go:[0-9]+:|^panic:|^FAIL[[:space:]]' "$log" | tail -n 80
fi
exit "$rc"
