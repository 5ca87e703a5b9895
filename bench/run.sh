#!/usr/bin/env bash
# bench/run.sh - the JSON write-path benchmark in one command.
#
#   bench/run.sh [--size small|default|large] [--connections C]
#                [--batch-records N] [--no-build] [--keep]
#
# Builds rankdbd and rdb-load if needed (meson setup build; ninja), starts
# rankdbd on a free loopback port in a fresh temp dir, measures the loader's
# own ceiling (rdb-load --sink), loads rankdbd, reads rankdbd's peak RSS
# (VmHWM), stops it with SIGTERM (it flushes everything to chunks) and waits
# for it, then measures the data directory and prints one results table.
#
# Environment: BUILD_DIR (default build), RANKDBD (default
# $BUILD_DIR/server/rankdbd), RANKDBD_ARGS (extra server flags),
# STOP_TIMEOUT_S (default 600). Only the rankdbd PID this script started is
# ever signalled. Traffic goes to 127.0.0.1 only.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"

size=default
connections=8
batch_records=64
build=1
keep=0
while [ $# -gt 0 ]; do
	case "$1" in
	--size) size=$2; shift 2 ;;
	--connections) connections=$2; shift 2 ;;
	--batch-records) batch_records=$2; shift 2 ;;
	--no-build) build=0; shift ;;
	--keep) keep=1; shift ;;
	-h|--help) sed -n '2,18p' "$0"; exit 0 ;;
	*) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
	esac
done
# The sink run resends the bodies so it lasts long enough to time (~1 s).
case "$size" in
small) sink_repeat=200 ;;
default) sink_repeat=10 ;;
large) sink_repeat=2 ;;
*) echo "run.sh: bad --size $size" >&2; exit 2 ;;
esac

build_dir=${BUILD_DIR:-build}
rankdbd=${RANKDBD:-$build_dir/server/rankdbd}
load=$build_dir/bench/rdb-load
stop_timeout_s=${STOP_TIMEOUT_S:-600}

if [ "$build" = 1 ]; then
	[ -d "$build_dir" ] || meson setup "$build_dir"
	targets=(bench/rdb-load bench/rdb-gen)
	[ -n "${RANKDBD:-}" ] || targets+=(server/rankdbd)
	ninja -C "$build_dir" "${targets[@]}"
fi
for f in "$rankdbd" "$load"; do
	[ -x "$f" ] || { echo "run.sh: $f missing (build it, or drop --no-build)" >&2; exit 2; }
done

tmp=$(mktemp -d /tmp/rankdb-bench.XXXXXX)
pid=
cleanup() {
	if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
		kill -KILL "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	fi
	if [ "$keep" = 1 ]; then
		echo "run.sh: kept $tmp"
	else
		rm -rf "$tmp"
	fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# key=value from the "result" line of an rdb-load output file
kv() {
	awk -v k="$2" '$1 == "result" {
		for (i = 2; i <= NF; i++) {
			n = index($i, "=")
			if (substr($i, 1, n - 1) == k)
				v = substr($i, n + 1)
		}
	} END { print v }' "$1"
}

load_args=(--size "$size" --connections "$connections" --batch-records "$batch_records")

echo "== loader ceiling (in-process discard sink)"
"$load" "${load_args[@]}" --sink --repeat "$sink_repeat" | tee "$tmp/sink.out"

echo "== starting rankdbd ($rankdbd)"
mkdir -p "$tmp/data"
# shellcheck disable=SC2086 # RANKDBD_ARGS is a list of words on purpose
"$rankdbd" --data-dir "$tmp/data" --http-port 0 --port-file "$tmp/port" --log-level warn \
	${RANKDBD_ARGS:-} >"$tmp/rankdbd.log" 2>&1 &
pid=$!
for _ in $(seq 300); do
	[ -s "$tmp/port" ] && break
	kill -0 "$pid" 2>/dev/null || break
	sleep 0.1
done
port=
[ -s "$tmp/port" ] && port=$(tr -dc '0-9' <"$tmp/port")
if ! kill -0 "$pid" 2>/dev/null; then
	echo "run.sh: rankdbd exited during startup; its log:" >&2
	tail -n 30 "$tmp/rankdbd.log" >&2
	exit 1
fi
if [ -z "$port" ]; then
	echo "run.sh: rankdbd wrote no port to $tmp/port within 30 s; its log:" >&2
	tail -n 30 "$tmp/rankdbd.log" >&2
	exit 1
fi

echo "== loading rankdbd on 127.0.0.1:$port"
load_rc=0
"$load" "${load_args[@]}" --host 127.0.0.1 --port "$port" | tee "$tmp/load.out" ||
	load_rc=${PIPESTATUS[0]}

hwm_kb=$(sed -n 's/^VmHWM:[[:space:]]*\([0-9]*\) kB/\1/p' "/proc/$pid/status" 2>/dev/null || true)

echo "== stopping rankdbd (SIGTERM, pid $pid)"
t_stop=$(date +%s.%N)
kill -TERM "$pid" 2>/dev/null || true
stopped=0
for _ in $(seq $((stop_timeout_s * 10))); do
	kill -0 "$pid" 2>/dev/null || { stopped=1; break; }
	sleep 0.1
done
server_rc=0
if [ "$stopped" = 1 ]; then
	wait "$pid" || server_rc=$?
else
	echo "run.sh: rankdbd still running ${stop_timeout_s}s after SIGTERM; killing it" >&2
	kill -KILL "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
	server_rc=killed
fi
pid=
stop_s=$(echo "$(date +%s.%N) $t_stop" | awk '{ printf "%.1f", $1 - $2 }')
if [ -s "$tmp/rankdbd.log" ]; then
	echo "-- rankdbd log (last 10 lines)"
	tail -n 10 "$tmp/rankdbd.log"
fi

du_b() { if [ -e "$1" ]; then du -sb "$1" | cut -f1; else echo 0; fi; }
chunks_b=$(du_b "$tmp/data/chunks")
index_b=$(du_b "$tmp/data/index")
data_b=$(du_b "$tmp/data")
[ -e "$tmp/data/chunks" ] || echo "run.sh: warning: $tmp/data/chunks does not exist" >&2
[ -e "$tmp/data/index" ] || echo "run.sh: warning: $tmp/data/index does not exist" >&2

points=$(kv "$tmp/load.out" points)
points=${points:-0}
# ratio A B FMT SCALE: A * SCALE / B formatted, or n/a when B is 0
ratio() {
	awk -v a="${1:-0}" -v b="${2:-0}" -v f="$3" -v s="$4" \
		'BEGIN { if (b > 0) printf f, s * a / b; else print "n/a" }'
}
per_point() { ratio "$1" "$points" "%.3f" 1; }
ceiling=$(kv "$tmp/sink.out" points_per_s)
pps=$(kv "$tmp/load.out" points_per_s)
vs_ceiling=$(ratio "$pps" "$ceiling" "%.2f%%" 100)
hwm=$(awk -v k="${hwm_kb:-}" 'BEGIN { if (k != "") printf "%.1f MiB", k / 1024; else print "n/a" }')

echo
echo "== rankdb JSON write benchmark: size=$size connections=$connections batch=$batch_records"
printf '%-34s %s\n' \
	"points written (2xx)" "$points" \
	"bodies / body bytes" "$(kv "$tmp/load.out" bodies) / $(kv "$tmp/load.out" bytes)" \
	"ingest seconds" "$(kv "$tmp/load.out" seconds)" \
	"ingest points/s" "${pps:-n/a}" \
	"ingest MB/s (JSON)" "$(kv "$tmp/load.out" mb_per_s)" \
	"request latency p50/p99/max ms" \
	"$(kv "$tmp/load.out" p50_ms) / $(kv "$tmp/load.out" p99_ms) / $(kv "$tmp/load.out" max_ms)" \
	"errors / retries / reconnects" \
	"$(kv "$tmp/load.out" errors) / $(kv "$tmp/load.out" retries) / $(kv "$tmp/load.out" reconnects)" \
	"loader ceiling points/s (sink)" "${ceiling:-n/a}" \
	"rankdbd / ceiling" "$vs_ceiling" \
	"rankdbd peak RSS (VmHWM)" "$hwm" \
	"shutdown (SIGTERM -> exit)" "${stop_s} s, exit status $server_rc" \
	"data/chunks bytes" "$chunks_b" \
	"data/index bytes" "$index_b" \
	"data dir bytes (all, incl. WAL)" "$data_b" \
	"bytes/point, chunks only" "$(per_point "$chunks_b")" \
	"bytes/point, chunks + index" "$(per_point $((chunks_b + index_b)))" \
	"bytes/point, JSON on the wire" "$(per_point "$(kv "$tmp/load.out" bytes)")"

if [ "$load_rc" != 0 ]; then
	echo "run.sh: rdb-load against rankdbd failed (exit $load_rc)" >&2
	exit 1
fi
if [ "$server_rc" != 0 ]; then
	echo "run.sh: rankdbd exited with status $server_rc after SIGTERM" >&2
	exit 1
fi
