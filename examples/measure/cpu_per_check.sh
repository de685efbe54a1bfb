#!/usr/bin/env bash
# CPU time per check of a `probe` workload, for comparisons on a shared machine (CPU time is
# disturbed by other processes far less than wall time):
#
#   cargo build --release --example probe
#   bash examples/measure/cpu_per_check.sh WORKLOAD N [RUNS]
#
# Runs `probe WORKLOAD N` and `probe WORKLOAD 1` (the same setup, one check) RUNS times (default
# 5), takes user + system time of each from /usr/bin/time (10 ms resolution: choose N so a run
# takes a second or more), and prints the median of (time(N) - time(1)) / N.
set -euo pipefail
w=$1
n=$2
runs=${3:-5}
bin=${PROBE:-target/release/examples/probe}
cpu() { /usr/bin/time -f "%U %S" "$bin" "$w" "$1" 2>&1 >/dev/null | tail -1 | awk '{print $1 + $2}'; }
for _ in $(seq "$runs"); do
    a=$(cpu "$n")
    b=$(cpu 1)
    awk -v a="$a" -v b="$b" 'BEGIN { print a - b }'
done | sort -g | awk -v n="$n" -v w="$w" '{d[NR] = $1} END {
    m = d[int((NR + 1) / 2)];
    printf "%s: median %.1f ns/check over %d runs (CPU time, N = %d)\n", w, m * 1e9 / n, NR, n }'
