#!/usr/bin/env bash
# Requests/s of a plain axum handler, behind cellgate-http's layer and behind tower_governor's,
# each admitting everything and denying everything (per peer IP), measured with wrk against
# 127.0.0.1. Bounded: ROUNDS x 5 modes x DURATION seconds of load. Modes are interleaved
# round by round so that drift on a shared machine spreads over all of them; the median of
# the rounds is reported.
#
#   apt-get install -y wrk
#   bash cellgate-http/benches/load/http_load.sh            # 3 rounds of 5 s
#   ROUNDS=5 DURATION=10 bash cellgate-http/benches/load/http_load.sh
#   MODES="plain plain-429 cellgate-deny" bash cellgate-http/benches/load/http_load.sh
# (the first mode is the baseline of the ratio column, so keep `plain` first). Like for like:
# `cellgate-admit-bare` / `cellgate-deny-bare` (the layer without its RateLimit headers, as
# tower_governor runs by default) and `governor-admit-headers` / `governor-deny-headers`
# (tower_governor's use_headers()); see bench_server.rs.
set -euo pipefail

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-5}
CONNECTIONS=${CONNECTIONS:-32}
PORT=${PORT:-18080}
read -r -a MODES <<<"${MODES:-plain cellgate-admit cellgate-deny governor-admit governor-deny}"

cd "$(dirname "$0")/../../.."
command -v wrk >/dev/null || { echo "wrk not found (apt-get install -y wrk)" >&2; exit 1; }
cargo build --release -q -p cellgate-http --example bench_server
target_dir=$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
server="$target_dir/release/examples/bench_server"
results=$(mktemp)
trap 'rm -f "$results"' EXIT

for round in $(seq 1 "$ROUNDS"); do
  for mode in "${MODES[@]}"; do
    log=$(mktemp)
    "$server" "$mode" "127.0.0.1:$PORT" >"$log" 2>&1 &
    pid=$!
    for _ in $(seq 1 100); do grep -q "listening on" "$log" && break; sleep 0.1; done
    grep -q "listening on" "$log" || { cat "$log" >&2; kill "$pid"; exit 1; }
    out=$(wrk -t1 -c"$CONNECTIONS" -d"${DURATION}s" "http://127.0.0.1:$PORT/")
    kill "$pid"; wait "$pid" 2>/dev/null || true; rm -f "$log"
    rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
    non2xx=$(awk '/Non-2xx/ {print $5}' <<<"$out")
    total=$(awk '/requests in/ {print $1}' <<<"$out")
    echo "round $round  $mode  ${rps} req/s  (${total} requests, ${non2xx:-0} non-2xx)"
    echo "$mode $rps $round" >>"$results"
  done
done

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
echo
echo "over $ROUNDS rounds (wrk -t1 -c$CONNECTIONS -d${DURATION}s, server on 1 worker thread):"
echo "  mode            median req/s   median of (mode / ${MODES[0]} of the same round)"
for mode in "${MODES[@]}"; do
  med=$(awk -v m="$mode" '$1==m {print $2}' "$results" | median)
  ratio=$(awk -v m="$mode" -v base="${MODES[0]}" '$1==base {p[$3]=$2} $1==m {r[$3]=$2} END {for (k in r) print r[k]/p[k]}' "$results" | median)
  printf "  %-15s %12.0f   %.2f\n" "$mode" "$med" "$ratio"
done
