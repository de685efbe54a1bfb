#!/usr/bin/env bash
# Instructions per request that the metrics add, counted with callgrind (a loaded machine does
# not disturb the counts the way it does timings).
#
#   bash cellgate-http/benches/load/metrics_instructions.sh [BINARY [deny]]
#
# Runs `layer_requests` (the layer with one `Global` GCRA limit, called directly, no network)
# with metrics off and on (every request admitted; with `deny`, every one denied), at 100k and 200k requests each, and prints for every function the
# instructions per request ((count at 200k - count at 100k) / 100k: setup excluded) where off
# and on differ by at least one, then the sum of those differences: what recording costs.
# Per function rather than the program total, which moves by tens of instructions per request
# from run to run and would drown a small cost. Left out: quanta's clock calibration
# (`OnceCell::initialize`, `clock_gettime`), which runs once, for a varying number of
# iterations.
set -euo pipefail
cd "$(dirname "$0")/../../.."
TARGET=${CARGO_TARGET_DIR:-target}
BIN=${1:-$TARGET/release/examples/layer_requests}
if [ -z "${1:-}" ]; then
    cargo build --release -q -p cellgate-http --features metrics --example layer_requests
fi
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
for m in off on; do
    for n in 100000 200000; do
        valgrind --tool=callgrind --callgrind-out-file="$OUT/$m.$n" "$BIN" "$m" "$n" ${2:-} >/dev/null 2>&1
        callgrind_annotate --threshold=100 "$OUT/$m.$n" 2>/dev/null |
            grep -v -e 'PROGRAM TOTALS' -e 'OnceCell<T>::initialize' -e 'clock_gettime' |
            sed -nE 's/^ *([0-9,]+) +\([^)]*\) +(.*)$/\1\t\2/p' | sed -E 's/,//; s/,//; s/,//; s/,//' \
            >"$OUT/$m.$n.tsv"
    done
done
awk -F'\t' '
    FILENAME ~ /off\.100000/ { o1[$2] = $1 }
    FILENAME ~ /off\.200000/ { o2[$2] = $1 }
    FILENAME ~ /on\.100000/  { n1[$2] = $1 }
    FILENAME ~ /on\.200000/  { n2[$2] = $1; names[$2] = 1 }
    END {
        for (f in o2) names[f] = 1
        total = 0
        for (f in names) {
            off = (o2[f] - o1[f]) / 100000; on = (n2[f] - n1[f]) / 100000
            d = on - off
            if (d >= 1 || d <= -1) { printf "%8.1f %8.1f %+8.1f  %s\n", off, on, d, substr(f, 1, 90); total += d }
        }
        printf "metrics on - off, per request: %+.1f instructions\n", total
    }' "$OUT"/off.100000.tsv "$OUT"/off.200000.tsv "$OUT"/on.100000.tsv "$OUT"/on.200000.tsv
