#!/usr/bin/env bash
# bench/run.sh - the JSON write-path benchmark in one command, and with
# --udp the UDP ingest benchmark after it.
#
#   bench/run.sh [--size small|default|large] [--connections C]
#                [--batch-records N] [--udp | --udp-only] [--datagram-bytes N]
#                [--udp-rate POINTS_PER_S] [--no-build] [--keep]
#
# Builds rankdbd and rdb-load if needed (meson setup build; ninja), starts
# rankdbd on a free loopback port in a fresh temp dir, measures the loader's
# own ceiling (rdb-load --sink), loads rankdbd, reads rankdbd's peak RSS
# (VmHWM), stops it with SIGTERM (it flushes everything to chunks) and waits
# for it, then measures the data directory and prints one results table.
# --udp then runs two UDP phases, each on a fresh rankdbd and data dir with
# --udp-port on a free port: the workload as line-protocol datagrams
# (rdb-load --udp) unpaced, then paced at half the unpaced offered rate (or
# --udp-rate); after each it waits until /metrics stops changing and prints
# points stored, points/s stored and loss. --udp-only skips the HTTP phase.
#
# Environment: BUILD_DIR (default build), RANKDBD (default
# $BUILD_DIR/server/rankdbd), RANKDBD_ARGS (extra server flags),
# STOP_TIMEOUT_S (default 600), SETTLE_TIMEOUT_S (UDP, default 60). Only the
# rankdbd PIDs this script started are ever signalled. Traffic goes to
# 127.0.0.1 only. Needs python3 for the UDP phases (free port, /metrics).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"

size=default
connections=8
batch_records=64
build=1
keep=0
http=1
udp=0
datagram_bytes=8192
udp_rate=
while [ $# -gt 0 ]; do
	case "$1" in
	--size) size=$2; shift 2 ;;
	--connections) connections=$2; shift 2 ;;
	--batch-records) batch_records=$2; shift 2 ;;
	--udp) udp=1; shift ;;
	--udp-only) udp=1; http=0; shift ;;
	--datagram-bytes) datagram_bytes=$2; shift 2 ;;
	--udp-rate) udp_rate=$2; shift 2 ;;
	--no-build) build=0; shift ;;
	--keep) keep=1; shift ;;
	-h|--help) sed -n '2,27p' "$0"; exit 0 ;;
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
settle_timeout_s=${SETTLE_TIMEOUT_S:-60}

if [ "$build" = 1 ]; then
	[ -d "$build_dir" ] || meson setup "$build_dir"
	targets=(bench/rdb-load bench/rdb-gen)
	[ -n "${RANKDBD:-}" ] || targets+=(server/rankdbd)
	ninja -C "$build_dir" "${targets[@]}"
fi
for f in "$rankdbd" "$load"; do
	[ -x "$f" ] || { echo "run.sh: $f missing (build it, or drop --no-build)" >&2; exit 2; }
done

. "$(dirname "$0")/lib.sh"
bench_tmp rankdb-bench


# start_server NAME [extra rankdbd flags]: rankdbd on $tmp/NAME/data; sets pid, port
start_server() {
	local d=$tmp/$1
	shift
	echo "== starting rankdbd ($rankdbd) in $d"
	mkdir -p "$d/data"
	# shellcheck disable=SC2086 # RANKDBD_ARGS is a list of words on purpose
	"$rankdbd" --data-dir "$d/data" --http-port 0 --port-file "$d/port" --log-level warn \
		"$@" ${RANKDBD_ARGS:-} >"$d/rankdbd.log" 2>&1 &
	pid=$!
	for _ in $(seq 300); do
		[ -s "$d/port" ] && break
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	port=
	[ -s "$d/port" ] && port=$(tr -dc '0-9' <"$d/port")
	if ! kill -0 "$pid" 2>/dev/null; then
		echo "run.sh: rankdbd exited during startup; its log:" >&2
		tail -n 30 "$d/rankdbd.log" >&2
		exit 1
	fi
	if [ -z "$port" ]; then
		echo "run.sh: rankdbd wrote no port to $d/port within 30 s; its log:" >&2
		tail -n 30 "$d/rankdbd.log" >&2
		exit 1
	fi
}

# stop_server NAME: SIGTERM, wait; sets server_rc, stop_s; clears pid
stop_server() {
	local t_stop stopped=0
	echo "== stopping rankdbd (SIGTERM, pid $pid)"
	t_stop=$(date +%s.%N)
	kill -TERM "$pid" 2>/dev/null || true
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
	if [ -s "$tmp/$1/rankdbd.log" ]; then
		echo "-- rankdbd log (last 10 lines)"
		tail -n 10 "$tmp/$1/rankdbd.log"
	fi
}

# ratio A B FMT SCALE: A * SCALE / B formatted, or n/a when B is 0
ratio() {
	awk -v a="${1:-0}" -v b="${2:-0}" -v f="$3" -v s="$4" \
		'BEGIN { if (b > 0) printf f, s * a / b; else print "n/a" }'
}

load_args=(--size "$size" --connections "$connections" --batch-records "$batch_records")
failed=0

http_phase() {
	echo "== loader ceiling (in-process discard sink)"
	"$load" "${load_args[@]}" --sink --repeat "$sink_repeat" | tee "$tmp/sink.out"

	start_server http
	echo "== loading rankdbd on 127.0.0.1:$port"
	local load_rc=0
	"$load" "${load_args[@]}" --host 127.0.0.1 --port "$port" | tee "$tmp/load.out" ||
		load_rc=${PIPESTATUS[0]}

	local hwm_kb
	hwm_kb=$(sed -n 's/^VmHWM:[[:space:]]*\([0-9]*\) kB/\1/p' "/proc/$pid/status" \
		2>/dev/null || true)
	stop_server http

	local data=$tmp/http/data
	du_b() { if [ -e "$1" ]; then du -sb "$1" | cut -f1; else echo 0; fi; }
	local chunks_b index_b data_b
	chunks_b=$(du_b "$data/chunks")
	index_b=$(du_b "$data/index")
	data_b=$(du_b "$data")
	[ -e "$data/chunks" ] || echo "run.sh: warning: $data/chunks does not exist" >&2
	[ -e "$data/index" ] || echo "run.sh: warning: $data/index does not exist" >&2

	local points ceiling pps vs_ceiling hwm
	points=$(kv "$tmp/load.out" points)
	points=${points:-0}
	per_point() { ratio "$1" "$points" "%.3f" 1; }
	ceiling=$(kv "$tmp/sink.out" points_per_s)
	pps=$(kv "$tmp/load.out" points_per_s)
	vs_ceiling=$(ratio "$pps" "$ceiling" "%.2f%%" 100)
	hwm=$(awk -v k="${hwm_kb:-}" \
		'BEGIN { if (k != "") printf "%.1f MiB", k / 1024; else print "n/a" }')

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
		failed=1
	fi
	if [ "$server_rc" != 0 ]; then
		echo "run.sh: rankdbd exited with status $server_rc after SIGTERM" >&2
		failed=1
	fi
}

# A free UDP port on 127.0.0.1 (bound to 0, read back, released).
free_udp_port() {
	python3 -c 'import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])'
}

# Writes rankdbd's /metrics (127.0.0.1:$port) to FILE; non-zero on failure.
fetch_metrics() {
	python3 -c 'import sys, urllib.request
with urllib.request.urlopen("http://127.0.0.1:%s/metrics" % sys.argv[1], timeout=5) as r:
	open(sys.argv[2], "wb").write(r.read())' "$port" "$1"
}

# metric FILE NAME: value of an unlabelled sample or NAME{...} sample, 0 if absent
metric() { awk -v k="$2" '$1 == k { v = $2 } END { print v + 0 }' "$1"; }

# udp_phase NAME RATE: one UDP load on a fresh rankdbd; results in $tmp/NAME.res
udp_phase() {
	local name=$1 rate=$2 udp_port load_rc=0 t_end t_last now m=$tmp/$1.metrics
	local prev="" cur stable=0 deadline
	udp_port=$(free_udp_port)
	start_server "$name" --udp-port "$udp_port" --udp-addr 127.0.0.1
	echo "== UDP load ($name, rate ${rate} points/s; 0 = unpaced) to 127.0.0.1:$udp_port"
	"$load" --size "$size" --connections "$connections" --batch-records "$batch_records" \
		--udp --format lp --datagram-bytes "$datagram_bytes" --rate "$rate" \
		--host 127.0.0.1 --port "$udp_port" | tee "$tmp/$name.out" ||
		load_rc=${PIPESTATUS[0]}
	t_end=$(date +%s.%N)
	t_last=$t_end
	# Wait until received, stored and queue depth stop changing (1 s unchanged,
	# queue empty), at most settle_timeout_s. t_last = the first poll that saw
	# the final values (polls 0.2 s apart), so the stored rate is a lower bound.
	deadline=$(awk -v t="$t_end" -v s="$settle_timeout_s" 'BEGIN { printf "%.3f", t + s }')
	while :; do
		if ! fetch_metrics "$m"; then
			echo "run.sh: cannot read /metrics from rankdbd" >&2
			break
		fi
		now=$(date +%s.%N)
		cur="$(metric "$m" rankdb_udp_datagrams_received_total) $(metric "$m" \
			rankdb_udp_points_total) $(metric "$m" rankdb_udp_queue_depth)"
		if [ "$cur" = "$prev" ]; then
			stable=$((stable + 1))
		else
			t_last=$now
			stable=0
		fi
		prev=$cur
		[ "$stable" -ge 5 ] && [ "${cur##* }" = 0 ] && break
		if awk -v a="$now" -v b="$deadline" 'BEGIN { exit !(a > b) }'; then
			echo "run.sh: UDP counters still changing ${settle_timeout_s}s after the load" >&2
			break
		fi
		sleep 0.2
	done
	# The kernel's own per-socket drop count (last column of /proc/net/udp).
	local kdrops
	kdrops=$(awk -v a="$(printf '0100007F:%04X' "$udp_port")" \
		'$2 == a { d = $NF } END { print d + 0 }' /proc/net/udp 2>/dev/null || echo 0)
	stop_server "$name"
	[ "$server_rc" = 0 ] || { echo "run.sh: rankdbd ($name) exited with $server_rc" >&2; failed=1; }
	[ "$load_rc" = 0 ] || { echo "run.sh: rdb-load --udp ($name) exited with $load_rc" >&2; failed=1; }
	local drain
	drain=$(awk -v a="$t_last" -v b="$t_end" 'BEGIN { d = a - b; printf "%.3f", (d > 0 ? d : 0) }')
	{
		echo "sent_dgrams=$(kv "$tmp/$name.out" datagrams)"
		echo "sent_points=$(kv "$tmp/$name.out" points)"
		echo "send_errors=$(kv "$tmp/$name.out" send_errors)"
		echo "seconds=$(kv "$tmp/$name.out" seconds)"
		echo "offered=$(kv "$tmp/$name.out" points_per_s)"
		echo "drain=$drain"
		echo "kdrops=$kdrops"
		echo "received=$(metric "$m" rankdb_udp_datagrams_received_total)"
		echo "stored=$(metric "$m" rankdb_udp_points_total)"
		for r in socket_buffer queue_full oversize parse_error busy series_limit error; do
			echo "drop_$r=$(metric "$m" "rankdb_udp_dropped_total{reason=\"$r\"}")"
		done
		echo "lines_dropped=$(metric "$m" rankdb_udp_lines_dropped_total)"
	} >"$tmp/$name.res"
}

# res NAME KEY: a value from $tmp/NAME.res
res() { sed -n "s/^$2=//p" "$tmp/$1.res"; }

# udp_col NAME ROW: one cell of the UDP table
udp_col() {
	local n=$1 sent stored secs
	sent=$(res "$n" sent_points)
	stored=$(res "$n" stored)
	secs=$(awk -v a="$(res "$n" seconds)" -v b="$(res "$n" drain)" 'BEGIN { print a + b }')
	case "$2" in
	rate) [ "$n" = udp-paced ] && echo "$paced_rate" || echo unpaced ;;
	sent) echo "$(res "$n" sent_dgrams) / $sent" ;;
	errors) res "$n" send_errors ;;
	offered) echo "$(res "$n" offered) (in $(res "$n" seconds) s)" ;;
	received) res "$n" received ;;
	stored) echo "$stored" ;;
	drops)
		echo "$(res "$n" drop_socket_buffer) / $(res "$n" drop_queue_full) / $(($(res "$n" \
			drop_oversize) + $(res "$n" drop_parse_error) + $(res "$n" drop_busy) + \
			$(res "$n" drop_series_limit) + $(res "$n" drop_error)))"
		;;
	kdrops) res "$n" kdrops ;;
	unaccounted)
		echo $(($(res "$n" sent_dgrams) - $(res "$n" received) - $(res "$n" kdrops)))
		;;
	pps) echo "$(ratio "$stored" "$secs" "%.0f" 1) (in $secs s)" ;;
	loss) awk -v s="$stored" -v p="$sent" \
		'BEGIN { if (p > 0) printf "%.2f%%", 100 * (1 - s / p); else print "n/a" }' ;;
	esac
}

[ "$http" = 1 ] && http_phase

if [ "$udp" = 1 ]; then
	command -v python3 >/dev/null || { echo "run.sh: --udp needs python3" >&2; exit 2; }
	udp_phase udp-unpaced 0
	paced_rate=${udp_rate:-$(awk -v r="$(res udp-unpaced offered)" \
		'BEGIN { printf "%.0f", r / 2 }')}
	[ "${paced_rate:-0}" -gt 0 ] 2>/dev/null || paced_rate=1
	udp_phase udp-paced "$paced_rate"

	echo
	echo "== rankdb UDP ingest benchmark: size=$size senders=$connections datagram<=$datagram_bytes B"
	printf '%-40s %-26s %s\n' "" "unpaced" "paced"
	for row in \
		"rate|sender rate (points/s)" \
		"sent|datagrams / points sent" \
		"errors|send() errors" \
		"offered|UDP points/s (offered)" \
		"received|datagrams received (rankdbd)" \
		"drops|drops: socket_buffer/queue_full/other" \
		"kdrops|kernel drops (/proc/net/udp)" \
		"unaccounted|unaccounted (sent-received-kernel)" \
		"stored|points stored" \
		"pps|UDP points/s (stored)" \
		"loss|UDP loss %"; do
		printf '%-40s %-26s %s\n' "${row#*|}" "$(udp_col udp-unpaced "${row%%|*}")" \
			"$(udp_col udp-paced "${row%%|*}")"
	done
fi

exit "$failed"
