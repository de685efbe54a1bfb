#!/usr/bin/env bash
# Throughput of CL.THROTTLE: cellgate-server against redis-server with redis-cell loaded, and
# against the same redis-server running a Lua GCRA script per request (gcra.lua beside this
# file, by EVALSHA, with the same arguments); same machine, same redis-benchmark flags, runs
# alternating between the three.
#
# usage: bench-resp.sh CELLGATE_SERVER_BIN LIBREDIS_CELL_SO [RUNS=3] [REQUESTS=200000]
# Prints one CSV line per run: target,pipeline,keys,run,rps,p50_ms,p99_ms
# then the medians per (target, pipeline, keys).
set -euo pipefail
bin="${1:?usage: bench-resp.sh CELLGATE_SERVER_BIN LIBREDIS_CELL_SO [RUNS] [REQUESTS]}"
so="${2:?usage: bench-resp.sh CELLGATE_SERVER_BIN LIBREDIS_CELL_SO [RUNS] [REQUESTS]}"
runs="${3:-3}"
requests="${4:-200000}"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
rport=$(free_port)
redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no --loadmodule "$so" >/dev/null &
rpid=$!
out=$(mktemp)
"$bin" --resp 127.0.0.1:0 --grpc off --http off >"$out" &
cpid=$!
trap 'kill $rpid $cpid 2>/dev/null; rm -f "$out" "$out.csv"' EXIT
for _ in $(seq 100); do grep -q '^listening resp' "$out" && redis-cli -p "$rport" ping >/dev/null 2>&1 && break; sleep 0.1; done
cport=$(sed -n 's/^listening resp .*:\([0-9]*\)$/\1/p' "$out")
sha=$(redis-cli -p "$rport" SCRIPT LOAD "$(cat "$(dirname "$0")/gcra.lua")")
one() { # target port pipeline keys run
  local args=(-h 127.0.0.1 -p "$2" -c 50 -n "$requests" -P "$3" --csv)
  local cmd=(CL.THROTTLE) key=key hot=hot
  if [ "$1" = lua ]; then cmd=(EVALSHA "$sha" 1) key=lua hot=lua-hot; fi
  if [ "$4" = random ]; then args+=(-r 100000 "${cmd[@]}" "$key:__rand_int__" 15 30 60)
  else args+=("${cmd[@]}" "$hot" 15 30 60); fi
  redis-benchmark "${args[@]}" | tail -1 | awk -F'"' -v t="$1" -v p="$3" -v k="$4" -v r="$5" \
    '{ printf "%s,%s,%s,%s,%s,%s,%s\n", t, p, k, r, $4, $10, $14 }'
}
echo "target,pipeline,keys,run,rps,p50_ms,p99_ms" | tee "$out.csv"
for run in $(seq "$runs"); do
  for p in 16 1; do
    for keys in random hot; do
      one cellgate "$cport" "$p" "$keys" "$run" | tee -a "$out.csv"
      one redis-cell "$rport" "$p" "$keys" "$run" | tee -a "$out.csv"
      one lua "$rport" "$p" "$keys" "$run" | tee -a "$out.csv"
    done
  done
done
echo "# medians: target,pipeline,keys,rps,p99_ms"
tail -n +2 "$out.csv" | sort -t, -k1,3 | awk -F, '
  { k=$1","$2","$3; n[k]++; rps[k,n[k]]=$5; p99[k,n[k]]=$7 }
  END { for (k in n) { m=int((n[k]+1)/2);
    # sort each key'"'"'s runs (few of them) for the median
    for (i=1;i<=n[k];i++) { a[i]=rps[k,i]; b[i]=p99[k,i] }
    for (i=1;i<=n[k];i++) for (j=i+1;j<=n[k];j++) { if (a[j]<a[i]) {t=a[i];a[i]=a[j];a[j]=t} if (b[j]<b[i]) {t=b[i];b[i]=b[j];b[j]=t} }
    print k "," a[m] "," b[m] } }' | sort
