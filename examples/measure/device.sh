#!/usr/bin/env bash
# Every many-core figure of BENCHMARKS.md, in one prepared run on a many-core machine
# (16 cores, no network, no registry: the binaries are built and packed here).
#
# Here, on the build machine (release builds, then packed with their libraries and loader, and
# redis-server / redis-cli, into .device/, which git ignores):
#
#   bash examples/measure/device.sh pack
#
# There, from a copy of the repository with .device/ beside it (about six minutes with the
# defaults below; everything lands in the directory $OUT names, at most 8 files):
#
#   bash examples/measure/device.sh run
#
# Here again, as a dry run of the same script at a small scale (a minute or two):
#
#   THREADS=1,2 SECONDS_PER_RUN=0.2 REPS=1 OUT=/tmp/device-dry bash examples/measure/device.sh run
#
# What it runs (each stage's output in its own file; a stage that fails is reported and the
# others still run):
#   machine.txt  the CPU, cores, memory
#   shapes.txt   `shapes --threads $THREADS` (limiters 1/3/9 x 1k/100k keys, hot key, disjoint
#                keys), cellgate beside governor in the same run; shapes.tsv its rows for
#                `python3 examples/measure/chart.py shapes.tsv > chart.svg`
#   flash.txt    examples/measure/flash_sale_threads.sh: the flash sale's attempts/s by threads,
#                whole sale and sold-out rush (--stock 0)
#   fleet.txt    bench_vs_lua --only "fleet stock" and "keyed leased" at 1 and 8 threads
#                against one packed redis-server: the fleet's local checks by threads
#   cluster.txt  bench_cluster: cold keyed decisions made in Redis a second on 1 node,
#                1 master and 3 masters, $CLUSTER_THREADS threads each with its own limiter
#                (as that many processes), max_wait 1 s and command timeout 2 s
#   server.txt   cellgate-server's tests/tools/bench-rls.sh: RLS over gRPC in process, fleet,
#                ratelimit's design (a Redis pipeline a request) and the empty handler, at
#                saturation and at half load (p50/p99/p99.9), redis-server on core 0, the
#                servers on the lower half of the cores, the client on the upper half
#
# STAGES picks the stages (default "shapes flash fleet cluster", about six minutes); the
# server's stage (about three minutes with the defaults) is a call of its own, so that each
# call stays well inside the device's ten minutes a command:
#
#   STAGES=server bash examples/measure/device.sh run
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

stage=${1:-}
THREADS=${THREADS:-1,2,4,8,16}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-0.5}
REPS=${REPS:-3}
FLEET_THREADS=${FLEET_THREADS:-"1 8"}
CLUSTER_THREADS=${CLUSTER_THREADS:-4}
STAGES=${STAGES:-shapes flash fleet cluster}
SERVER_RUNS=${SERVER_RUNS:-2}
SERVER_SECONDS=${SERVER_SECONDS:-2}
# stage NAME: whether STAGES names it.
stage() { [[ " $STAGES " == *" $1 "* ]]; }

case $stage in
pack)
    set -e
    cargo build --release --example shapes --example flash_sale
    cargo build --release -p cellgate-redis --example bench_vs_lua --example bench_cluster
    cargo build --release -p cellgate-server --bins --example rls_load --example key_memory
    bins=(target/release/cellgate-server)
    for b in shapes flash_sale bench_vs_lua bench_cluster rls_load key_memory; do
        bins+=("target/release/examples/$b")
    done
    ../shared/tools/device-pack .device "${bins[@]}" "$(command -v redis-server)" "$(command -v redis-cli)"
    # bench_cluster runs the bench_vs_lua next to its own executable: through the packed
    # loader that is the loader's folder, so a stub there runs the packed one.
    printf '#!/usr/bin/env bash\nexec "$(dirname "$0")/../run" bench_vs_lua "$@"\n' >.device/lib/bench_vs_lua
    chmod +x .device/lib/bench_vs_lua
    ;;
run)
    [[ -x .device/run ]] || { echo "no .device/run: run '$0 pack' on the build machine first" >&2; exit 2; }
    OUT=${OUT:-/tmp/device-out}
    mkdir -p "$OUT"
    # The flash sale's and the fleet's runs: 4x a shapes cell, at least 1 s.
    long=$(awk "BEGIN {s = 4 * $SECONDS_PER_RUN; print (s < 1) ? 1 : s}")
    # redis-server and redis-cli on the PATH (bench_cluster starts them) run the packed ones.
    wrap=$(mktemp -d)
    for b in redis-server redis-cli cellgate-server rls_load key_memory; do
        printf '#!/usr/bin/env bash\nexec %q %s "$@"\n' "$PWD/.device/run" "$b" >"$wrap/$b"
        chmod +x "$wrap/$b"
    done
    export PATH="$wrap:$PATH"
    failed=()
    {
        date -u
        grep -m1 'model name' /proc/cpuinfo
        echo "cpus: $(nproc)"
        grep MemTotal /proc/meminfo
        uptime
    } >"$OUT/machine.txt" 2>&1

    if stage shapes; then
        echo "== shapes" >&2
        .device/run shapes --threads "$THREADS" --seconds "$SECONDS_PER_RUN" --reps "$REPS" \
            --tsv "$OUT/shapes.tsv" >"$OUT/shapes.txt" 2>&1 || failed+=(shapes)
    fi

    if stage flash; then
        echo "== flash sale" >&2
        BIN=".device/run flash_sale" THREADS="${THREADS//,/ }" SECONDS_PER_RUN=$long \
            REPS=$REPS bash examples/measure/flash_sale_threads.sh >"$OUT/flash.txt" 2>&1 || failed+=(flash)
    fi

    dir=$(mktemp -d)
    if stage fleet; then
        echo "== fleet local" >&2
        port=$((20000 + RANDOM % 20000))
        redis-server --port "$port" --save '' --appendonly no --dir "$dir" --daemonize no >"$dir/log" 2>&1 &
        redis=$!
        for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
        {
            for row in "fleet stock" "keyed leased"; do
                for t in $FLEET_THREADS; do
                    echo "-- $row, $t threads"
                    .device/run bench_vs_lua --redis "redis://127.0.0.1:$port" --only "$row" \
                        --threads "$t" --seconds "$long" \
                        --runs "$REPS"
                done
            done
        } >"$OUT/fleet.txt" 2>&1 || failed+=(fleet)
        kill "$redis" 2>/dev/null
        wait "$redis" 2>/dev/null
    fi

    if stage cluster; then
        echo "== cluster" >&2
        # Waits raised so that a saturated master makes checks wait rather than go to the outage
        # fallback: the figure is decisions made in Redis (bench_cluster subtracts the others).
        .device/run bench_cluster --seconds "$long" \
            --runs "$REPS" --threads "$CLUSTER_THREADS" --fleets "$CLUSTER_THREADS" --concurrency 256 \
            --max-wait 1000 --command-timeout 2000 >"$OUT/cluster.txt" 2>&1 || failed+=(cluster)
    fi

    if stage server; then
        echo "== server" >&2
        # redis-server alone on core 0 (one thread bounds ratelimit's design), the servers on
        # the rest of the lower half, the client on the upper half; on fewer than 8 cores the
        # 2-vCPU layout (servers and redis-server on 0, the client on 1).
        n=$(nproc)
        if ((n >= 8)); then
            layout=(REDIS_CPUS=0 SERVER_CPUS="1-$((n / 2 - 1))" CLIENT_CPUS="$((n / 2))-$((n - 1))"
                CONNECTIONS=$((n / 2)) IN_FLIGHT=$((64 * n / 4)) HALF_IN_FLIGHT=$((128 * n / 4)))
        else
            layout=(PIN=1)
        fi
        { echo "layout: ${layout[*]}"; env "${layout[@]}" bash cellgate-server/tests/tools/bench-rls.sh \
            "$wrap/cellgate-server" "$wrap/rls_load" "$wrap/key_memory" \
            "$SERVER_RUNS" "$SERVER_SECONDS" "${SERVER_FLOOD:-1000000}"; } >"$OUT/server.txt" 2>&1 || failed+=(server)
    fi

    rm -rf "$wrap" "$dir"
    if ((${#failed[@]})); then
        echo "failed stages: ${failed[*]} (see their files in $OUT)" >&2
        exit 1
    fi
    echo "all stages ran; files in $OUT" >&2
    ;;
*)
    echo "usage: $0 pack|run" >&2
    exit 2
    ;;
esac
