#!/usr/bin/env bash
# The flash sale's attempts/s by threads: the whole sale (default flags) and the sold-out rush
# (--stock 0), each thread count run REPS times in turn (1, 2, ..., 1, 2, ...), the median
# printed with its ratio to the 1-thread median.
#
#   bash examples/measure/flash_sale_threads.sh                  # threads 1 2, 3 s, 5 reps
#   THREADS="1 2 4 8 16" SECONDS_PER_RUN=3 REPS=3 bash examples/measure/flash_sale_threads.sh
#   BIN=.device/run\ flash_sale bash examples/measure/flash_sale_threads.sh   # another binary
#
# Builds the example first unless BIN is set. Exits non-zero if any run's invariants failed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

THREADS=${THREADS:-"1 2"}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-3}
REPS=${REPS:-5}
if [[ -z ${BIN:-} ]]; then
    cargo build --release --example flash_sale >&2
    BIN=target/release/examples/flash_sale
fi

median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'); $(nproc) CPUs"
echo "command: THREADS=\"$THREADS\" SECONDS_PER_RUN=$SECONDS_PER_RUN REPS=$REPS $0"
for stock in default 0; do
    flags=(--duration "$SECONDS_PER_RUN")
    [[ $stock == 0 ]] && flags+=(--stock 0)
    declare -A rates=()
    for ((r = 0; r < REPS; r++)); do
        for t in $THREADS; do
            out=$($BIN "${flags[@]}" --threads "$t")
            grep -q 'all invariants hold' <<<"$out" || {
                echo "invariants failed at --threads $t --stock $stock:" >&2
                echo "$out" >&2
                exit 1
            }
            # "attempts 2150400 in 2.00 s (1.08 M/s), ..."
            rate=$(sed -n 's/^attempts \([0-9]*\) in \([0-9.]*\) s.*/\1 \2/p' <<<"$out" | awk '{printf "%.0f", $1 / $2}')
            rates[$t]="${rates[$t]:-} $rate"
        done
    done
    base=""
    echo
    echo "stock $stock: attempts/s by threads (median of $REPS; each run's figure in brackets)"
    for t in $THREADS; do
        m=$(tr ' ' '\n' <<<"${rates[$t]}" | grep . | median)
        [[ -z $base ]] && base=$m
        printf "  %3s threads  %8.2f M/s  %5.2fx 1 thread   [%s ]\n" "$t" "$(awk "BEGIN {print $m / 1e6}")" \
            "$(awk "BEGIN {print $m / $base}")" "$(for v in ${rates[$t]}; do printf ' %.2f' "$(awk "BEGIN {print $v / 1e6}")"; done)"
    done
    unset rates
done
