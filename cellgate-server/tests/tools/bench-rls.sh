#!/usr/bin/env bash
# RLS over gRPC: cellgate-server against ratelimit's design (a gRPC server answering each
# request with one Redis pipeline of INCRBY + EXPIRE per descriptor) and against the ceiling
# (the same gRPC stack, an empty handler), one client for all, runs alternating. A fourth
# target, `fleet`, is cellgate-server in fleet mode (`--redis` to the same redis-server).
#
# usage: bench-rls.sh CELLGATE_SERVER_BIN RLS_LOAD_BIN KEY_MEMORY_BIN [RUNS=5] [SECONDS=3] [FLOOD=1000000]
#   (build them: cargo build --release -p cellgate-server --bins --examples)
#
# 1. Saturation: closed loop, 4 connections, 64 requests in flight (see below); 1 and 3 descriptors,
#    keys from a set of 1,000 and of 1,000,000. CSV per run, then medians. Each run also
#    gives the server side's CPU time per request (user + system, from /proc; the baseline's
#    and the fleet's count redis-server too): steadier than the rates on a shared machine.
# 2. Half load: open loop at half cellgate-server's median saturating rate of each shape,
#    128 tasks; every latency from its scheduled send (a pacer thread; see rls_load's load.rs).
# 3. Memory per key: a fresh cellgate-server's RSS growth under a flood of FLOOD distinct
#    keys (one descriptor each), over its live keys; beside the core KeyedLimiter's
#    (KEY_MEMORY_BIN, the same keys).
# `uptime` before and after: the machine's load when the figures were taken.
# PIN=1 in the environment pins the servers and redis-server to CPU 0 and the client to CPU 1
# (`taskset`), so that the client never runs on a server's core: on a 2-vCPU machine the
# scheduler's wake-up delays between the two otherwise dominate the latency percentiles.
# On a many-core machine name the core sets instead (taskset's lists): SERVER_CPUS for the
# four servers, REDIS_CPUS for redis-server (default: SERVER_CPUS), CLIENT_CPUS for the
# client; CONNECTIONS and IN_FLIGHT (default 4 and 64) size the closed loop, HALF_IN_FLIGHT
# (default 128) the open loop's tasks. Each server's runtime has a worker per core it may use.
set -euo pipefail
srv=()
cli=()
red=()
if [ "${PIN:-0}" = 1 ]; then
  SERVER_CPUS=${SERVER_CPUS:-0}
  CLIENT_CPUS=${CLIENT_CPUS:-1}
fi
if [ -n "${SERVER_CPUS:-}" ]; then srv=(taskset -c "$SERVER_CPUS"); fi
if [ -n "${CLIENT_CPUS:-}" ]; then cli=(taskset -c "$CLIENT_CPUS"); fi
if [ -n "${REDIS_CPUS:-${SERVER_CPUS:-}}" ]; then red=(taskset -c "${REDIS_CPUS:-$SERVER_CPUS}"); fi
conns=${CONNECTIONS:-4}
inflight=${IN_FLIGHT:-64}
half_inflight=${HALF_IN_FLIGHT:-128}
usage="usage: bench-rls.sh CELLGATE_SERVER_BIN RLS_LOAD_BIN KEY_MEMORY_BIN [RUNS=5] [SECONDS=3] [FLOOD=1000000]"
bin="${1:?$usage}"
load="${2:?$usage}"
keymem="${3:?$usage}"
runs="${4:-5}"
secs="${5:-3}"
flood="${6:-1000000}"
config="$(cd "$(dirname "$0")/../../config" && pwd)"
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$tmp"; }
trap cleanup EXIT
# A port nothing listens on (python3 where there is one; else a random high port).
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null ||
    echo $((20000 + RANDOM % 20000))
}
# wait_addr FILE WHAT: the address a server announced with `listening WHAT ADDR`.
wait_addr() {
  for _ in $(seq 100); do grep -q "^listening $2 " "$1" && break; sleep 0.1; done
  sed -n "s/^listening $2 //p" "$1"
}
rport=$(free_port)
"${red[@]}" redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no >/dev/null &
rpid=$!
pids+=($rpid)
for _ in $(seq 100); do redis-cli -p "$rport" ping >/dev/null 2>&1 && break; sleep 0.1; done
# The server-side processes of each target, whose CPU time is counted per request (the
# baseline's includes redis-server's).
declare -A procs
procs[redis]=$rpid
"${srv[@]}" "$bin" --config "$config" --grpc 127.0.0.1:0 --http off --resp off >"$tmp/cellgate" 2>/dev/null &
pids+=($!)
procs[cellgate]=$!
"${srv[@]}" "$bin" --config "$config" --grpc 127.0.0.1:0 --http off --resp off \
  --redis "redis://127.0.0.1:$rport" >"$tmp/fleet" 2>/dev/null &
pids+=($!)
procs[fleet]="$! $rpid"
"${srv[@]}" "$load" serve --handler redis-pipeline --redis "redis://127.0.0.1:$rport" >"$tmp/redis" &
pids+=($!)
procs[redis]+=" $!"
"${srv[@]}" "$load" serve --handler empty >"$tmp/empty" &
pids+=($!)
procs[empty]=$!
hz=$(getconf CLK_TCK)
# cpu_ticks PID...: user + system time of the processes, in clock ticks.
cpu_ticks() { local t=0 p; for p in "$@"; do t=$((t + $(awk '{ print $14 + $15 }' "/proc/$p/stat"))); done; echo $t; }
declare -A addr
for t in cellgate fleet redis empty; do addr[$t]=$(wait_addr "$tmp/$t" grpc); done
echo "# uptime before: $(uptime)"
# one TARGET MODE DESCRIPTORS KEYS RUN [load flags...]: one CSV line, ending with the
# server-side CPU time per request in microseconds.
one() {
  local t=$1 m=$2 d=$3 k=$4 r=$5 before line
  shift 5
  # shellcheck disable=SC2086 # procs holds a list of pids
  before=$(cpu_ticks ${procs[$t]})
  line=$("${cli[@]}" "$load" load --addr "${addr[$t]}" --descriptors "$d" --keys "$k" --seconds "$secs" --csv "$@")
  # shellcheck disable=SC2086
  awk -v l="$line" -v t="$t,$m,$d,$k,$r" -v ticks=$(($(cpu_ticks ${procs[$t]}) - before)) \
    -v hz="$hz" -v s="$secs" 'BEGIN { split(l, f, ","); printf "%s,%s,%.1f\n", t, l, ticks * 1e6 / hz / (f[1] * s) }'
}
# medians CSV: per target,mode,descriptors,keys the median of rps, p50, p99, p99.9 and server
# CPU per request over the runs.
medians() {
  sort -t, -k1,4 "$1" | awk -F, '
    function med(col,   i, j, t, a) { for (i = 1; i <= c; i++) a[i] = v[col, i]
      for (i = 1; i <= c; i++) for (j = i + 1; j <= c; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
      return a[int((c + 1) / 2)] }
    function flush() { if (c) print key "," med(6) "," med(7) "," med(8) "," med(9) "," med(13) }
    { k = $1 "," $2 "," $3 "," $4; if (k != key) { flush(); key = k; c = 0 }
      c++; for (f = 6; f <= 13; f++) v[f, c] = $f }
    END { flush() }'
}
header="target,mode,descriptors,keys,run,rps,p50_us,p99_us,p999_us,over_limit,errors,late,server_cpu_us"
echo "$header" | tee "$tmp/runs.csv"
for run in $(seq "$runs"); do
  for d in 1 3; do
    for k in 1000 1000000; do
      for t in cellgate fleet redis empty; do
        one "$t" saturation "$d" "$k" "$run" --connections "$conns" --in-flight "$inflight" | tee -a "$tmp/runs.csv"
      done
    done
  done
done
tail -n +2 "$tmp/runs.csv" | medians /dev/stdin >"$tmp/sat.csv"
declare -A half
while IFS=, read -r t _ d k rps _; do
  [ "$t" = cellgate ] && half[$d,$k]=$((${rps%.*} / 2))
done <"$tmp/sat.csv"
for run in $(seq "$runs"); do
  for d in 1 3; do
    for k in 1000 1000000; do
      for t in cellgate fleet redis empty; do
        one "$t" half "$d" "$k" "$run" --connections "$conns" --in-flight "$half_inflight" --rate "${half[$d,$k]}" \
          | tee -a "$tmp/runs.csv"
      done
    done
  done
done
echo "# medians of $runs runs: target,mode,descriptors,keys,rps,p50_us,p99_us,p999_us,server_cpu_us"
tail -n +2 "$tmp/runs.csv" | medians /dev/stdin | tee "$tmp/med.csv"
echo "# ratios of the median rates at saturation: cellgate/empty, cellgate/redis"
awk -F, '$2 == "saturation" { r[$1, $3, $4] = $5; s[$3 "," $4] = 1 }
  END { for (x in s) { split(x, a, ","); printf "descriptors=%s keys=%s: %.2fx the ceiling, %.2fx the baseline\n",
    a[1], a[2], r["cellgate", a[1], a[2]] / r["empty", a[1], a[2]], r["cellgate", a[1], a[2]] / r["redis", a[1], a[2]] } }' \
  "$tmp/med.csv" | sort
echo "# fleet mode: cellgate-server --redis over the same in-process, median rates at saturation"
awk -F, '$2 == "saturation" { r[$1, $3, $4] = $5; s[$3 "," $4] = 1 }
  END { for (x in s) { split(x, a, ","); printf "descriptors=%s keys=%s: %.2fx in-process\n",
    a[1], a[2], r["fleet", a[1], a[2]] / r["cellgate", a[1], a[2]] } }' "$tmp/med.csv" | sort
echo "# ratios of the median server CPU per request at saturation: cellgate/empty, cellgate/redis"
awk -F, '$2 == "saturation" { r[$1, $3, $4] = $9; s[$3 "," $4] = 1 }
  END { for (x in s) { split(x, a, ","); printf "descriptors=%s keys=%s: %.2fx the ceiling'"'"'s, %.2fx the baseline'"'"'s\n",
    a[1], a[2], r["cellgate", a[1], a[2]] / r["empty", a[1], a[2]], r["cellgate", a[1], a[2]] / r["redis", a[1], a[2]] } }' \
  "$tmp/med.csv" | sort
echo "# uptime after the load runs: $(uptime)"

# Memory per live key (FLOOD=0 skips it): a fresh server (room for the flood in its
# remote_address limit).
[ "$flood" -gt 0 ] || exit 0
"$bin" --config "$config" --grpc 127.0.0.1:0 --http 127.0.0.1:0 --resp off \
  --max-keys $((flood * 16)) >"$tmp/mem" 2>/dev/null &
mpid=$!
pids+=($mpid)
maddr=$(wait_addr "$tmp/mem" grpc)
haddr=$(wait_addr "$tmp/mem" http)
rss() { awk '/^VmRSS:/ { print $2 * 1024 }' "/proc/$mpid/status"; }
live() { curl -s "http://$haddr/metrics" | awk '/^cellgate_live_keys / { print $2 }'; }
# Warm the connections and the allocator first, on a key the flood does not use.
"$load" load --addr "$maddr" --keys 1 --seconds 1 --label warm-up >/dev/null
before=$(rss)
keys_before=$(live)
"$load" load --addr "$maddr" --distinct "$flood" --label flood
after=$(rss)
keys_after=$(live)
awk -v b="$before" -v a="$after" -v kb="$keys_before" -v ka="$keys_after" 'BEGIN {
  printf "server: %d live keys added, RSS +%.1f MiB = %.1f B/key\n", ka - kb, (a - b) / 1048576, (a - b) / (ka - kb) }'
"$keymem" "$flood"
